"""GPT-2 BPE through tiktoken, built offline from a local `.tiktoken` rank file.

The rank file has the r50k_base layout: one `base64(token) rank` per line. The PyPI source package
`openai-whisper` carries it as `whisper/assets/gpt2.tiktoken` (byte-identical to tiktoken's
r50k_base). Nothing is downloaded: a missing file is a ValueError saying where to get one.
"""

from __future__ import annotations

import base64
import hashlib
import os
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    import tiktoken

EOT = "<|endoftext|>"
# GPT-2's pre-tokenisation pattern (tiktoken's r50k_base / gpt2 encodings).
GPT2_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}++| ?\p{N}++| ?[^\s\p{L}\p{N}]++|\s++$|\s+(?!\S)|\s"""
# sha256 of GPT-2's rank file (tiktoken's r50k_base; openai-whisper's gpt2.tiktoken).
GPT2_SHA256 = "306cd27f03c1a714eca7108e03d66b7dc042abe8c258b44c199a7ed9838dd930"
WHERE_TO_GET = ("get GPT-2's rank file offline from the PyPI source package openai-whisper "
                "(whisper/assets/gpt2.tiktoken, identical to tiktoken's r50k_base)")


def file_sha256(path: str | os.PathLike[str]) -> str:
    """Hex sha256 of a file's bytes."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def read_ranks(path: str | os.PathLike[str]) -> dict[bytes, int]:
    """The token -> rank table of a `.tiktoken` file; ValueError naming the file and the bad line."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"tokenizer file {path} does not exist; {WHERE_TO_GET}")
    ranks: dict[bytes, int] = {}
    with open(path, "rb") as f:
        for lineno, line in enumerate(f, start=1):
            if not line.strip():
                continue
            parts = line.split()
            try:
                token, rank = base64.b64decode(parts[0], validate=True), int(parts[1])
                if len(parts) != 2:
                    raise ValueError
            except (ValueError, IndexError):
                raise ValueError(f"tokenizer file {path}: line {lineno} is not 'base64(token) rank'") from None
            ranks[token] = rank
    if sorted(ranks.values()) != list(range(len(ranks))):
        raise ValueError(f"tokenizer file {path}: ranks must be 0..{len(ranks) - 1}, each once")
    missing = [b for b in range(256) if bytes([b]) not in ranks]
    if missing:
        raise ValueError(f"tokenizer file {path}: {len(missing)} single bytes have no rank (e.g. {missing[0]})")
    return ranks


def load_tokenizer(path: str | os.PathLike[str]) -> tiktoken.Encoding:
    """GPT-2 BPE from the rank file at `path`, with `<|endoftext|>` right after the last rank
    (id 50256 for GPT-2's file)."""
    import tiktoken

    ranks = read_ranks(path)
    return tiktoken.Encoding(name=f"gpt2@{Path(path).name}", pat_str=GPT2_PATTERN,
                             mergeable_ranks=ranks, special_tokens={EOT: len(ranks)})


def encode_documents(enc: tiktoken.Encoding, texts: Iterable[str]) -> np.ndarray:
    """Token ids of `texts` as one uint16 stream, each document preceded by EOT (llm.c's layout),
    so EOT separates documents. Text that spells `<|endoftext|>` is encoded as plain text."""
    texts = list(texts)
    if enc.n_vocab > 1 << 16:
        raise ValueError(f"the tokenizer has {enc.n_vocab} ids; uint16 shards hold at most {1 << 16}")
    eot = enc.eot_token
    pieces = []
    for ids in enc.encode_ordinary_batch(texts):
        pieces.append(np.array([eot, *ids], dtype=np.uint16))
    return np.concatenate(pieces) if pieces else np.zeros(0, dtype=np.uint16)
