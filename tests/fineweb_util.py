"""Synthetic FineWeb-Edu inputs for the tests: a tiny BPE rank file and parquet files with the schema."""

from __future__ import annotations

import base64
from pathlib import Path

MERGES = (b"th", b"he", b" t", b"the", b" the", b"in", b"ing", b"er")


def write_rank_file(path: Path) -> Path:
    """All 256 single bytes, then a few merges: a valid `.tiktoken` file of 256 + len(MERGES) ranks."""
    tokens = [bytes([b]) for b in range(256)] + list(MERGES)
    path.write_text("".join(f"{base64.b64encode(t).decode()} {r}\n" for r, t in enumerate(tokens)))
    return path


def documents(n: int, seed: int = 0) -> list[str]:
    """`n` short English-like documents of varied length (the ith holds i-dependent words)."""
    words = ["the", "thing", "in", "other", "weather", "éclair", "42", "it's", "ring", "\n"]
    out = []
    for i in range(n):
        k = 5 + (i * 7 + seed) % 23
        out.append(" ".join(words[(i + j * 3 + seed) % len(words)] for j in range(k)) + f" doc{i}.")
    return out


def write_parquet(path: Path, texts: list[str], int_scores: list[int] | None = None,
                  drop: tuple[str, ...] = ()) -> Path:
    """A parquet file with the FineWeb-Edu columns (minus `drop`) holding `texts`."""
    import pandas as pd

    n = len(texts)
    scores = int_scores if int_scores is not None else [3] * n
    frame = pd.DataFrame({
        "text": texts, "id": [f"<urn:{i}>" for i in range(n)], "dump": ["CC-MAIN-2024-10"] * n,
        "url": [f"https://example.org/{i}" for i in range(n)], "file_path": ["s3://x/y.warc.gz"] * n,
        "language": ["en"] * n, "language_score": [0.95] * n, "token_count": [len(t) for t in texts],
        "score": [float(s) + 0.2 for s in scores], "int_score": scores,
    })
    frame.drop(columns=list(drop)).to_parquet(path, index=False)
    return path
