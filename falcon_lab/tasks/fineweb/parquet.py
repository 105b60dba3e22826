"""FineWeb-Edu documents from local parquet files, in a fixed order, with their stream positions."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from pathlib import Path

COLUMNS = ("text", "id", "dump", "url", "file_path", "language", "language_score", "token_count", "score",
           "int_score")
READ_ROWS = 1024


def parquet_files(sources: Sequence[str | os.PathLike[str]]) -> list[Path]:
    """The parquet files of `sources` (files, or folders whose `*.parquet` are taken in name order),
    in the order given; ValueError naming a source that is missing or holds none."""
    files: list[Path] = []
    for source in sources:
        path = Path(source)
        if path.is_dir():
            found = sorted(path.glob("*.parquet"))
            if not found:
                raise ValueError(f"--parquet folder {path} holds no *.parquet files")
            files.extend(found)
        elif path.is_file():
            files.append(path)
        else:
            raise ValueError(f"--parquet {path} does not exist; accepted: parquet files or folders of them")
    if not files:
        raise ValueError("--parquet needs at least one parquet file or folder")
    return files


def check_schema(path: Path) -> None:
    """ValueError naming the FineWeb-Edu columns that `path` lacks."""
    import pyarrow.parquet as pq

    try:
        names = set(pq.ParquetFile(path).schema_arrow.names)
    except Exception as err:  # pyarrow raises several types for an unreadable file
        raise ValueError(f"parquet file {path} cannot be read: {err}") from None
    missing = [c for c in COLUMNS if c not in names]
    if missing:
        raise ValueError(f"parquet file {path} lacks FineWeb-Edu columns {', '.join(missing)}; "
                         f"expected: {', '.join(COLUMNS)}")


def iter_texts(
    files: Sequence[Path], min_int_score: int | None = None, start: tuple[int, int] = (0, 0)
) -> Iterator[tuple[int, int, list[str]]]:
    """(file index, index of the block's first row, texts) in blocks, from row `start[1]` of file
    `start[0]` on. A row left out (null text, or int_score null or below `min_int_score`) is None in
    its block, so that block position + i always names one row of the file."""
    import pyarrow.parquet as pq

    first_file, first_row = start
    for f in range(first_file, len(files)):
        row = 0
        skip = first_row if f == first_file else 0
        for batch in pq.ParquetFile(files[f]).iter_batches(batch_size=READ_ROWS, columns=["text", "int_score"]):
            n = batch.num_rows
            if row + n <= skip:
                row += n
                continue
            texts, scores = batch.column("text").to_pylist(), batch.column("int_score").to_pylist()
            lo = max(skip - row, 0)
            block = []
            for i in range(lo, n):
                keep = min_int_score is None or (scores[i] is not None and scores[i] >= min_int_score)
                block.append(texts[i] if keep and texts[i] is not None else None)
            yield f, row + lo, block
            row += n
