"""Compact run records: the large files of a finished run's folder kept gzipped in git.

A recorded run folder (`records/<track>/.../runs/<id>/`) holds its `positions.csv` (the accuracy of every
answer digit of every width at the best and the last step, about 100 kB a run), its `metrics.csv` and
`evals.csv` (`evals_raw.csv` with `train.ema`), and Lightning's CSV log of the same rows as metrics.csv
(`logs/csv/version_<n>/metrics.csv`); gzipped, each takes a fifth to a tenth of its size. `compact_runs`
replaces each such file by `<name>.gz`, written deterministically (no name or time in the gzip header, so
compacting the same file twice gives the same bytes and git sees no change) and atomically (the gzipped file is
whole before the plain one goes). Readers ask `readable(path)` for the file to open, the plain file where it
exists, else its `.gz` (pandas reads either), or `open_text(path)` for a text handle on whichever it is.

Only finished runs are compacted: a running or resumable run still appends to its files. A compacted run that is
trained further reads its rows back through `readable` and writes its files whole and plain again, which
readers then take over the stale `.gz`.
"""

from __future__ import annotations

import gzip
import io
import json
from pathlib import Path
from typing import TextIO

from falcon_lab.tasks.files import atomic_write

# The files of a run folder kept gzipped in the records (glob patterns, relative to the run folder).
COMPACTED = ("positions.csv", "metrics.csv", "evals.csv", "evals_raw.csv", "logs/csv/version_*/metrics.csv")


def readable(path: str | Path) -> Path:
    """`path`, or its compacted form `path.gz` where only that exists (`path` again where neither does, so a
    caller's "no such file" names the file it asked for)."""
    path = Path(path)
    packed = path.with_name(path.name + ".gz")
    return packed if not path.exists() and packed.exists() else path


def open_text(path: str | Path) -> TextIO:
    """A text handle (UTF-8, newlines untranslated, as the csv module wants) on `readable(path)`: the plain file,
    or its gzipped form read back as text."""
    path = readable(path)
    if path.suffix == ".gz":
        return gzip.open(path, "rt", encoding="utf-8", newline="")
    return path.open(encoding="utf-8", newline="")


def gzip_bytes(data: bytes) -> bytes:
    """`data` gzipped at level 9 with an empty name and time 0 in the header: the same bytes every time."""
    buffer = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=buffer, compresslevel=9, mtime=0) as f:
        f.write(data)
    return buffer.getvalue()


def compact_run(run: Path, dry_run: bool = False) -> list[Path]:
    """Gzip the COMPACTED files of the finished run folder `run`; the files written (would be, on a dry run).

    Raises ValueError naming the run when it is not finished (no run.json, or a status other than finished)."""
    state = run / "run.json"
    try:
        status = json.loads(state.read_text(encoding="utf-8")).get("status") if state.is_file() else None
    except (json.JSONDecodeError, UnicodeDecodeError) as err:
        raise ValueError(f"{state}: not a readable run.json ({err})") from None
    if status != "finished":
        raise ValueError(f"{run}: the run is {status or 'without a run.json'}, not finished; only finished runs "
                         f"are compacted (a run still training appends to its files)")
    written = []
    for plain in sorted(p for pattern in COMPACTED for p in run.glob(pattern) if p.is_file()):
        packed = plain.with_name(plain.name + ".gz")
        if not dry_run:
            data = plain.read_bytes()
            atomic_write(packed, lambda f, d=data: f.write(gzip_bytes(d)))
            if gzip.decompress(packed.read_bytes()) != data:  # never drop a file its copy does not hold
                raise OSError(f"{packed}: the gzipped copy does not read back as {plain}; {plain} kept")
            plain.unlink()
        written.append(packed)
    return written


def compact_runs(folder: str | Path, dry_run: bool = False) -> list[Path]:
    """Compact every finished run under `folder` (a `runs/` folder, or any folder above run folders); runs not
    finished are skipped. `folder` may be one run folder, which must then be finished (else ValueError). The
    files written, in order."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ValueError(f"{folder}: no such folder")
    if (folder / "run.json").is_file():
        return compact_run(folder, dry_run=dry_run)  # one run named: say why it is not compacted
    runs = sorted(p.parent for p in folder.glob("**/run.json"))
    written: list[Path] = []
    for run in runs:
        try:
            written += compact_run(run, dry_run=dry_run)
        except ValueError:
            continue  # a run not finished keeps its files as they are
    return written
