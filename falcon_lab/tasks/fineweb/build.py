"""A document stream (FineWeb-Edu parquet, or any other source of texts) -> llm.c token shards, resumable.

The token stream is every kept document in file and row order, each preceded by EOT. Its first
`val_tokens` tokens form `<prefix>_val_000000.bin`; the rest is cut into `<prefix>_train_00000N.bin`
shards of `shard_tokens` (the last one shorter), as llm.c does. After each shard the manifest
(`manifest.json`, written atomically) records it and the stream position where it ended, so a
rerun keeps the finished shards and continues from there.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from falcon_lab.tasks.files import atomic_write_text
from falcon_lab.tasks.fineweb.parquet import check_schema, iter_texts, parquet_files
from falcon_lab.tasks.fineweb.shards import read_header, shard_name, write_shard
from falcon_lab.tasks.fineweb.tokenizer import file_sha256, load_tokenizer

PREFIX = "edufineweb"
MANIFEST = "manifest.json"
# (file index, index of its first row, texts with None for a row left out): one block of a document stream.
Block = tuple[int, int, list[str | None]]


def write_json(path: Path, data: dict[str, Any]) -> None:
    """Write `data` as JSON at `path`, whole or not at all."""
    atomic_write_text(path, json.dumps(data, indent=2) + "\n")


def read_manifest(folder: str | os.PathLike[str]) -> dict[str, Any] | None:
    """The manifest of a shard folder, or None if it has none."""
    path = Path(folder) / MANIFEST
    if not path.exists():
        return None
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as err:
        raise ValueError(f"{path} is not valid JSON ({err.msg}); remove it to rebuild the folder") from None


def _kept_shards(out: Path, manifest: dict[str, Any]) -> list[dict[str, Any]]:
    """The manifest's shards, up to the first one missing or not matching its recorded count."""
    kept = []
    for shard in manifest["shards"]:
        try:
            ok = read_header(out / shard["name"]) == shard["tokens"]
        except ValueError:
            ok = False
        if not ok:
            break
        kept.append(shard)
    return kept


def build_shards(
    sources: Sequence[str | os.PathLike[str]],
    tokenizer: str | os.PathLike[str],
    out: str | os.PathLike[str],
    shard_tokens: int = 100_000_000,
    val_tokens: int = 10_000_000,
    min_int_score: int | None = None,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Tokenise the parquet `sources` into shards in `out`, continuing a previous run's shards made
    with the same settings; returns the manifest."""
    files = parquet_files(sources)
    for path in files:
        check_schema(path)
    described = {"sources": [{"path": str(p.resolve()), "bytes": p.stat().st_size} for p in files],
                 "min_int_score": min_int_score}
    return write_stream(lambda start: iter_texts(files, min_int_score, start), len(files), described, tokenizer,
                        out, PREFIX, shard_tokens, val_tokens, log)


def write_stream(
    blocks: Callable[[tuple[int, int]], Iterator[Block]],
    n_files: int,
    described: dict[str, Any],
    tokenizer: str | os.PathLike[str],
    out: str | os.PathLike[str],
    prefix: str,
    shard_tokens: int,
    val_tokens: int,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Tokenise a document stream into `<prefix>_{val,train}_*.bin` shards in `out`, resumably; returns
    the manifest. `blocks(start)` yields (file index, index of the block's first row, texts) from
    position `start` = (file, row) of the stream's `n_files` files on, None for a row left out;
    `described` (the sources and any filter) joins the settings that a rerun must repeat."""
    if shard_tokens < 1 or val_tokens < 1:
        raise ValueError(f"--shard-tokens and --val-tokens must be >= 1, got {shard_tokens} and {val_tokens}")
    enc = load_tokenizer(tokenizer)
    out = Path(out)
    settings = {
        **described,
        "tokenizer": str(Path(tokenizer).resolve()),
        "tokenizer_sha256": file_sha256(tokenizer),
        "vocab_size": enc.n_vocab,
        "eot": enc.eot_token,
        "shard_tokens": shard_tokens,
        "val_tokens": val_tokens,
    }
    manifest = read_manifest(out)
    if manifest is not None:
        changed = [k for k in settings if k != "tokenizer" and manifest["settings"].get(k) != settings[k]]
        if manifest.get("prefix", PREFIX) != prefix:
            changed.append("prefix")
        if changed:
            raise ValueError(f"--out {out} holds shards made with other settings ({', '.join(changed)} differ); "
                             f"accepted: the same settings to continue, or another --out")
        manifest["shards"] = _kept_shards(out, manifest)
        if manifest["complete"] and len(manifest["shards"]) == manifest["n_shards"]:
            log(f"{out}: all {manifest['n_shards']} shards are already written")
            return manifest
    else:
        manifest = {"format": "llm.c token shards (uint16, magic 20240520, version 1)", "prefix": prefix,
                    "settings": settings, "shards": []}
    manifest["complete"] = False
    shards = manifest["shards"]
    position = shards[-1]["end"] if shards else {"file": 0, "row": 0, "offset": 0}
    _continue(blocks, n_files, enc, out, manifest, position, log)
    return manifest


def _continue(blocks: Callable[[tuple[int, int]], Iterator[Block]], n_files: int, enc, out: Path,
              manifest: dict[str, Any], position: dict[str, int], log: Callable[[str], None]) -> None:
    settings, shards = manifest["settings"], manifest["shards"]
    prefix = manifest["prefix"]
    eot = enc.eot_token

    def capacity() -> int:
        return settings["val_tokens"] if not shards else settings["shard_tokens"]

    buffer = np.empty(capacity(), dtype=np.uint16)
    filled, documents = 0, 0

    def flush(end: dict[str, int]) -> None:
        nonlocal buffer, filled, documents
        index = len(shards)
        name = shard_name(prefix, "val" if index == 0 else "train", index)
        write_shard(out / name, buffer[:filled])
        shards.append({"name": name, "tokens": filled, "documents": documents, "end": end})
        _summarise(manifest)
        write_json(out / MANIFEST, manifest)
        log(f"wrote {name}: {filled} tokens, {documents} documents starting in it")
        buffer, filled, documents = np.empty(capacity(), dtype=np.uint16), 0, 0

    skip = position["offset"]
    for f, first_row, block in blocks((position["file"], position["row"])):
        kept = [i for i, text in enumerate(block) if text is not None]
        encoded = enc.encode_ordinary_batch([block[i] for i in kept])
        for i, ids in zip(kept, encoded):
            doc = np.empty(len(ids) + 1, dtype=np.uint16)
            doc[0], doc[1:] = eot, ids
            at = skip
            if skip == 0:
                documents += 1
            skip = 0
            while at < len(doc):
                take = min(len(doc) - at, len(buffer) - filled)
                buffer[filled:filled + take] = doc[at:at + take]
                filled, at = filled + take, at + take
                if filled == len(buffer):
                    row = first_row + i
                    end = {"file": f, "row": row, "offset": at} if at < len(doc) else \
                        {"file": f, "row": row + 1, "offset": 0}
                    flush(end)
    if filled:
        flush({"file": n_files, "row": 0, "offset": 0})
    manifest["complete"] = True
    _summarise(manifest)
    write_json(out / MANIFEST, manifest)


def _summarise(manifest: dict[str, Any]) -> None:
    shards = manifest["shards"]
    manifest["n_shards"] = len(shards)
    manifest["documents"] = sum(s["documents"] for s in shards)
    manifest["val_tokens"] = shards[0]["tokens"] if shards else 0
    manifest["train_tokens"] = sum(s["tokens"] for s in shards[1:])
