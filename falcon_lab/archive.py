"""Snapshots of finished runs as one archive, and reading such an archive back.

A long campaign on a borrowed machine may be killed at its time limit; what it left in a given folder still
comes back. So `lab experiment run --snapshot-dir DIR` writes `DIR/<experiment>.tgz` every few minutes: the
run records of the finished runs (config.yaml, provenance.json, run.json, metrics, evaluations and logs; no
checkpoint or weights) under `runs/<id>/`, the experiment's tables under `tables/`, and `snapshot.json` saying
what it holds. Each archive is written whole or not at all (a temporary file, then a rename). `lab runs merge
ARCHIVE` brings its runs into a results folder as it brings any folder of run records (falcon_lab.merge).
"""

from __future__ import annotations

import io
import json
import tarfile
import zlib
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from falcon_lab.tasks.files import atomic_write

# Files a snapshot leaves out: weights and checkpoints (large, and of no use without the machine's state) and
# the run folders' lock files.
LEFT_OUT = (".ckpt", ".pt", ".lock")
ARCHIVE_SUFFIXES = (".tgz", ".tar.gz", ".tar")


def is_archive(path: Path) -> bool:
    """Whether `path` names an archive file (rather than a folder of runs)."""
    return path.is_file() and path.name.endswith(ARCHIVE_SUFFIXES)


def _kept(path: Path) -> bool:
    return not path.name.endswith(LEFT_OUT) and path.name != ".lock"


def write_snapshot(path: Path, runs: Iterable[Path], tables: Path | None, manifest: dict[str, Any]) -> int:
    """Write the archive `path` atomically: each run folder of `runs` under `runs/<name>/` (no weights,
    checkpoints or locks), the files of the folder `tables` (if it exists) under `tables/`, and `manifest` as
    `snapshot.json`. Returns how many run folders it holds."""
    count = 0

    def add_tree(tar: tarfile.TarFile, folder: Path, under: str) -> None:
        for file in sorted(folder.rglob("*")):
            if file.is_file() and _kept(file) and not any(p.startswith(".") for p in file.relative_to(folder).parts):
                tar.add(file, arcname=f"{under}/{file.relative_to(folder).as_posix()}", recursive=False)

    def write(f: io.BufferedIOBase) -> None:
        nonlocal count
        with tarfile.open(fileobj=f, mode="w:gz") as tar:
            data = json.dumps(manifest, indent=2).encode("utf-8") + b"\n"
            info = tarfile.TarInfo("snapshot.json")
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
            for run in runs:
                if run.is_dir():
                    add_tree(tar, run, f"runs/{run.name}")
                    count += 1
            if tables is not None and tables.is_dir():
                add_tree(tar, tables, "tables")

    atomic_write(path, write)  # type: ignore[arg-type]
    return count


def write_tree(path: Path, folder: Path) -> int:
    """Write the archive `path` atomically holding every plain file under `folder` by its relative path (no locks);
    the number of files. For the compilation caches (`lab experiment run --caches`)."""
    files = [f for f in sorted(folder.rglob("*")) if f.is_file() and not f.is_symlink() and f.name != ".lock"]

    def write(f: io.BufferedIOBase) -> None:
        with tarfile.open(fileobj=f, mode="w:gz") as tar:
            for file in files:
                tar.add(file, arcname=file.relative_to(folder).as_posix(), recursive=False)

    atomic_write(path, write)  # type: ignore[arg-type]
    return len(files)


def extract_archive(path: Path, into: Path) -> Path:
    """Unpack the archive `path` into the folder `into` (files of the same names replaced) and return it. Only plain
    files and folders under relative paths are taken. ValueError naming the archive when it cannot be read whole
    (truncated, not an archive, a member outside the folder)."""
    try:
        with tarfile.open(path, mode="r:*") as tar:
            members = tar.getmembers()
            for m in members:
                parts = Path(m.name).parts
                if m.name.startswith("/") or ".." in parts or not (m.isfile() or m.isdir()):
                    raise ValueError(f"the archive {path} holds {m.name!r}, which is not a plain file under it")
            tar.extractall(into, members=members, filter="data")
    except (tarfile.TarError, EOFError, OSError, zlib.error) as err:
        raise ValueError(f"the archive {path} cannot be read: {err or type(err).__name__}") from None
    return into


def read_manifest(folder: Path) -> dict[str, Any]:
    """The `snapshot.json` of an unpacked archive ({} when it has none); ValueError when it is not JSON."""
    path = folder / "snapshot.json"
    if not path.is_file():
        return {}
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except ValueError as err:
        raise ValueError(f"the snapshot's {path.name} cannot be read: {err}") from None
