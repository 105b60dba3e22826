"""Token shards in llm.c's layout: a 256 x int32 little-endian header (magic 20240520, version 1,
token count), then the tokens as little-endian uint16.

Writes are atomic (a temporary file in the same folder replaces the shard once complete); reads
memory-map the tokens after checking the header, the count against the file size and the token
range against the vocabulary.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from falcon_lab.tasks.files import atomic_write
MAGIC = 20240520
VERSION = 1
HEADER_INTS = 256
HEADER_BYTES = HEADER_INTS * 4
SPLITS = ("val", "train")


def shard_name(prefix: str, split: str, index: int) -> str:
    """llm.c's file name: `<prefix>_<split>_<index:06d>.bin`."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not accepted; accepted: {', '.join(SPLITS)}")
    return f"{prefix}_{split}_{index:06d}.bin"


def write_shard(path: str | os.PathLike[str], tokens: np.ndarray) -> int:
    """Write `tokens` (values in [0, 65536)) as one shard at `path`, whole or not at all; returns the count."""
    path = Path(path)
    tokens = np.asarray(tokens)
    if tokens.ndim != 1:
        raise ValueError(f"tokens must be one-dimensional, got shape {tokens.shape}")
    if tokens.size and (tokens.min() < 0 or tokens.max() >= 1 << 16):
        raise ValueError(f"tokens must lie in [0, 65536) to fit uint16, got [{tokens.min()}, {tokens.max()}]")
    header = np.zeros(HEADER_INTS, dtype="<i4")
    header[:3] = (MAGIC, VERSION, tokens.size)
    atomic_write(path, lambda f: (f.write(header.tobytes()), f.write(tokens.astype("<u2").tobytes())))
    return int(tokens.size)


def read_header(path: str | os.PathLike[str]) -> int:
    """The token count of the shard at `path` after checking its header and size; ValueError naming
    the file and what is wrong."""
    path = Path(path)
    try:
        size = path.stat().st_size
        with open(path, "rb") as f:
            raw = f.read(HEADER_BYTES)
    except OSError as err:
        raise ValueError(f"shard {path}: cannot read it ({err.strerror})") from None
    if len(raw) < HEADER_BYTES:
        raise ValueError(f"shard {path}: truncated header ({len(raw)} of {HEADER_BYTES} bytes)")
    magic, version, count = (int(v) for v in np.frombuffer(raw, dtype="<i4", count=3))
    if magic != MAGIC:
        raise ValueError(f"shard {path}: bad magic {magic}; an llm.c token shard starts with {MAGIC}")
    if version != VERSION:
        raise ValueError(f"shard {path}: version {version} is not accepted; accepted: {VERSION} (uint16 tokens)")
    if count < 0:
        raise ValueError(f"shard {path}: negative token count {count} in the header")
    expected = HEADER_BYTES + 2 * count
    if size != expected:
        kind = "truncated" if size < expected else "longer than its header says"
        raise ValueError(f"shard {path}: {kind}: the header counts {count} tokens ({expected} bytes), "
                         f"the file has {size} bytes")
    return count


def read_shard(path: str | os.PathLike[str], vocab_size: int | None = None) -> np.ndarray:
    """The tokens of the shard at `path` as a read-only uint16 memmap. With `vocab_size`, every token
    must be below it (a full scan); ValueError naming the file and the first bad token otherwise."""
    count = read_header(path)
    tokens = np.memmap(path, dtype="<u2", mode="r", offset=HEADER_BYTES, shape=(count,))
    if vocab_size is not None and count:
        top = int(tokens.max())
        if top >= vocab_size:
            at = int(np.argmax(tokens >= vocab_size))
            raise ValueError(f"shard {path}: token {int(tokens[at])} at position {at} is outside the "
                             f"vocabulary of {vocab_size} ids")
    return tokens


def find_shards(folder: str | os.PathLike[str], split: str) -> list[Path]:
    """The `*_<split>_*.bin` shards of `folder`, in name order; ValueError if there are none."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not accepted; accepted: {', '.join(SPLITS)}")
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"shard folder {folder} does not exist (make one with `lab data fineweb`)")
    found = sorted(folder.glob(f"*_{split}_*.bin"))
    if not found:
        raise ValueError(f"shard folder {folder} has no {split} shards (*_{split}_*.bin)")
    return found
