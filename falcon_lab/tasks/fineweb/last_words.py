"""LAMBADA-style last-word passages from a validation shard (`lab data last-words`).

LAMBADA (Paperno et al., 2016) asks for the last word of a passage given all of it before. Its passages are
novels, filtered by people to those whose last word needs the whole context. Where only other text is local,
this builds passages of the same shape from the validation shard of a corpus (never trained on): each shard
document (the stream's documents start with the end-of-text token) is decoded, cut into paragraphs at blank
lines, and a paragraph is kept when it reads as prose — at least `min_words` words, characters only from
letters, digits, spaces and plain punctuation (no markup: no backquotes, asterisks, bars, underscores or equals
signs), ending in a full stop after a word of letters — and its text without the final full stop is written.
The last paragraph of the shard is dropped (the shard may end inside it). There is no human filter: the last
word is often guessable from the sentence alone, so scores here are not LAMBADA's and compare only across
models scored on the same file.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import tiktoken

PROSE = re.compile(r"[A-Za-z0-9 .,;:'\"()\-?!/]+")
LAST_WORD = re.compile(r"[A-Za-z]{3,}")


def prose_passage(paragraph: str, min_words: int) -> str | None:
    """The paragraph as one line without its final full stop when it is a last-word passage, else None."""
    text = " ".join(paragraph.split())
    if not text.endswith(".") or text.endswith("..") or not PROSE.fullmatch(text):
        return None
    text = text[:-1]
    words = text.split(" ")
    if len(words) < min_words + 1 or not LAST_WORD.fullmatch(words[-1]):
        return None
    return text


def shard_passages(tokens: np.ndarray, enc: tiktoken.Encoding, min_words: int = 40) -> list[str]:
    """Every last-word passage of a token shard, in the shard's order, each once."""
    eot = enc.eot_token
    cuts = np.flatnonzero(tokens == eot)
    starts = [0, *(cuts + 1)]
    ends = [*cuts, len(tokens)]
    paragraphs: list[str] = []
    for start, end in zip(starts, ends):
        if end > start:
            text = enc.decode(tokens[start:end].tolist())
            paragraphs.extend(re.split(r"\n\s*\n", text))
    paragraphs = paragraphs[:-1]  # the shard may end inside its last paragraph
    seen: set[str] = set()
    out = []
    for paragraph in paragraphs:
        passage = prose_passage(paragraph, min_words)
        if passage is not None and passage not in seen:
            seen.add(passage)
            out.append(passage)
    return out


def write_last_words(shard: str | os.PathLike[str], enc: tiktoken.Encoding, out: str | os.PathLike[str],
                     n: int | None = None, min_words: int = 40) -> dict[str, Any]:
    """Write the shard's first `n` passages (all with None) to `out` as .jsonl ({"text": ...} a line), atomically;
    returns what was written. ValueError when the shard holds none."""
    from falcon_lab.tasks.fineweb.shards import read_shard

    if n is not None and n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if min_words < 1:
        raise ValueError(f"min_words must be >= 1, got {min_words}")
    passages = shard_passages(read_shard(shard, enc.n_vocab), enc, min_words)
    if not passages:
        raise ValueError(f"{shard}: no paragraph of {min_words}+ words of plain prose ending in a full stop")
    chosen = passages[:n]
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=out.parent, prefix=f".{out.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            for text in chosen:
                f.write(json.dumps({"text": text}, ensure_ascii=False) + "\n")
        os.replace(tmp, out)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return {"file": str(out), "passages": len(chosen), "found": len(passages), "shard": str(shard),
            "min_words": min_words}
