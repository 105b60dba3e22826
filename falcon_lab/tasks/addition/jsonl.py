"""Addition splits on disk: one JSON record per line, written atomically, read back with validation."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, BinaryIO

from falcon_lab.tasks.addition.generate import DEFAULT_N_PER_LENGTH, generate_records, validate_record
from falcon_lab.tasks.files import atomic_write


def write_jsonl(
    path: str | os.PathLike[str],
    split: str,
    digits: tuple[int, int] | None = None,
    n_per_length: int = DEFAULT_N_PER_LENGTH,
    seed: int = 0,
) -> int:
    """Write `n_per_length` records per width in `digits` (default: the split's range) to `path`.

    The file appears whole or not at all: lines go to a temporary file in the same folder, which
    replaces `path` only once complete. Returns the number of records written.
    """
    path = Path(path)
    records = generate_records(split, digits, n_per_length, seed)  # validates its arguments first
    count = 0

    def write(f: BinaryIO) -> None:
        nonlocal count
        for record in records:
            f.write((json.dumps(record, separators=(",", ":")) + "\n").encode("utf-8"))
            count += 1

    atomic_write(path, write)
    return count


def read_jsonl(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All records of `path`; a malformed line raises ValueError naming the file, line and field."""
    records = []
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, start=1):
            where = f"{path}: line {lineno}"
            try:
                record = json.loads(line)
            except json.JSONDecodeError as err:
                raise ValueError(f"{where}: not valid JSON ({err.msg})") from None
            try:
                records.append(validate_record(record))
            except ValueError as err:
                raise ValueError(f"{where}: {err}") from None
    return records
