"""Run folders, provenance and the SQLite run registry.

A run lives in `<results>/runs/<id>/` (`<results>`: `falcon_lab.paths.results_root()`; id: a short hash of its
configuration) and holds `config.yaml`, `metrics.csv`, `checkpoints/`, `provenance.json` (where, when, from
which code and command) and `run.json` (its status: running, finished, stopped (ended early, resumable), failed
or interrupted). The registry `<results>/lab.db` indexes every run in the table
`runs`, one row per id; `pandas.read_sql("select * from runs", sqlite3.connect(path))` reads it.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import socket
import sqlite3
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from falcon_lab.paths import REPO_ROOT, results_root
from falcon_lab.typed import ConfigError
from falcon_lab.tasks.files import atomic_write, atomic_write_text, file_mode  # noqa: F401 (lab's writers import them here)


def now() -> str:
    """The current time in UTC, ISO 8601, to the second."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def process_age() -> float | None:
    """Seconds since this process started (from Linux's /proc: its start in clock ticks after boot), None where
    that cannot be read."""
    try:
        start_ticks = int(Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()[19])
        uptime = float(Path("/proc/uptime").read_text().split()[0])
        return max(0.0, uptime - start_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


@dataclass(frozen=True)
class RunDir:
    """The files of one run folder."""

    root: Path

    @property
    def config(self) -> Path:
        return self.root / "config.yaml"

    @property
    def metrics(self) -> Path:
        return self.root / "metrics.csv"

    @property
    def checkpoints(self) -> Path:
        return self.root / "checkpoints"

    @property
    def last_checkpoint(self) -> Path:
        return self.checkpoints / "last.ckpt"

    @property
    def previous_checkpoint(self) -> Path:
        """The checkpoint before the last one, kept so that a resume can fall back on it when last.ckpt is
        unreadable."""
        return self.checkpoints / "previous.ckpt"

    @property
    def failed_weights(self) -> Path:
        """The weights a run had when it failed on a non-finite loss or gradient (best.pt's layout)."""
        return self.checkpoints / "failed.pt"

    @property
    def provenance(self) -> Path:
        return self.root / "provenance.json"

    @property
    def state(self) -> Path:
        return self.root / "run.json"

    def read_state(self) -> dict[str, Any]:
        """The run's status record ({} when the folder holds no run yet)."""
        if not self.state.exists():
            return {}
        return json.loads(self.state.read_text(encoding="utf-8"))

    def write_state(self, **fields: Any) -> dict[str, Any]:
        """Update the status record with `fields` (and `updated_at`), atomically; return it."""
        state = {**self.read_state(), **fields, "updated_at": now()}
        atomic_write_text(self.state, json.dumps(state, indent=2) + "\n")
        return state


class RunBusy(RuntimeError):
    """Another process is training in this run folder."""


class RunLock:
    """Exclusive hold of a run folder while it trains: an advisory flock on `<folder>/.lock`, released
    when the holder exits, however it exits (a SIGKILLed holder leaves nothing to clean up)."""

    def __init__(self, run: RunDir) -> None:
        self.path = run.root / ".lock"
        self.fd: int | None = None

    def __enter__(self) -> RunLock:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, file_mode())
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode(errors="replace").strip() or "unknown"
            os.close(fd)
            raise RunBusy(f"run folder {self.path.parent} is in use by another process (pid {holder}); "
                          "wait for it to end or choose another --out") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        self.fd = fd
        return self

    def __exit__(self, *exc: object) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def run_dir_for(run_id: str, out: str | Path | None = None, results: str | Path | None = None) -> RunDir:
    """`out` when given, else `<results>/runs/<run_id>`."""
    if out is not None:
        return RunDir(Path(out).resolve())
    return RunDir((Path(results) if results is not None else results_root()).resolve() / "runs" / run_id)


def _git(*args: str) -> str | None:
    try:
        proc = subprocess.run(["git", "-C", str(REPO_ROOT), *args], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def git_state() -> dict[str, Any]:
    """{"commit", "dirty"} of the code checkout. $LAB_COMMIT, when set, names the commit instead: a copy of
    the tree shipped to another machine may carry no git history, or a stale one. Changes under records/
    (the committed evidence, rewritten only where a user points a command at it) do not make the code dirty."""
    if os.environ.get("LAB_COMMIT"):
        return {"commit": os.environ["LAB_COMMIT"], "dirty": None}
    commit = _git("rev-parse", "HEAD")
    if commit is None:
        return {"commit": os.environ.get("LAB_COMMIT"), "dirty": None}
    status = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":(exclude)records")
    return {"commit": commit, "dirty": bool(status)}


def device_name() -> str:
    """The GPU's name when CUDA is available, else the CPU's model name."""
    import torch

    if torch.cuda.is_available():
        return f"{torch.cuda.get_device_name(0)} x{torch.cuda.device_count()}"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def command_line(argv: Sequence[str] | None = None) -> list[str]:
    """The command that started this process, as a user would retype it (`python -m falcon_lab ...` for
    the module entry point, whose argv[0] is the path of falcon_lab/__main__.py)."""
    argv = list(sys.argv if argv is None else argv)
    if argv and Path(argv[0]).resolve() == Path(__file__).resolve().parent / "__main__.py":
        return ["python", "-m", "falcon_lab", *argv[1:]]
    return argv


def provenance(argv: Sequence[str] | None = None, **extra: Any) -> dict[str, Any]:
    """Where and from what a run is made: code version, command, machine, library versions, date."""
    import lightning
    import torch

    return {
        **git_state(),
        "command": command_line(argv),
        "cwd": os.getcwd(),
        "hostname": socket.gethostname(),
        "device": device_name(),
        "cuda": torch.version.cuda,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "lightning": lightning.__version__,
        "date": now(),
        **extra,
    }


def record_provenance(run: RunDir, info: Mapping[str, Any]) -> None:
    """Write provenance.json; when it exists, keep the original and append `info` to its `resumes`."""
    if run.provenance.exists():
        data = json.loads(run.provenance.read_text(encoding="utf-8"))
        data.setdefault("resumes", []).append(dict(info))
    else:
        data = dict(info)
    atomic_write_text(run.provenance, json.dumps(data, indent=2) + "\n")


COLUMNS = {
    "id": "TEXT PRIMARY KEY", "task": "TEXT", "mixer": "TEXT", "preset": "TEXT", "status": "TEXT",
    "steps": "INTEGER", "max_steps": "INTEGER", "final_loss": "REAL", "final_val_loss": "REAL",
    "final_val_acc": "REAL", "n_params": "INTEGER", "metrics": "TEXT", "run_dir": "TEXT",
    "checkpoint_dir": "TEXT", "config": "TEXT", "commit": "TEXT", "dirty": "INTEGER",
    "host": "TEXT", "device": "TEXT", "message": "TEXT", "created_at": "TEXT", "updated_at": "TEXT",
    "finished_at": "TEXT",
}


class RegistryError(ConfigError):
    """The registry file cannot be read as one (a damaged or foreign file); the message is one line."""


class Registry:
    """The SQLite table `runs` at `path`: one row per run id, upserted as the run progresses.

    Each call opens its own short connection, so concurrent runs and readers only wait on SQLite's
    lock (up to `timeout` seconds). RegistryError when `path` is not a database that can be read.
    """

    def __init__(self, path: str | Path, timeout: float = 30.0) -> None:
        self.path, self.timeout = Path(path), timeout
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self._connect() as db:
                # Identifiers are quoted: `commit` is an SQL keyword.
                columns = ", ".join(f'"{name}" {kind}' for name, kind in COLUMNS.items())
                db.execute(f"CREATE TABLE IF NOT EXISTS runs ({columns})")
        except sqlite3.DatabaseError as err:
            raise RegistryError(f"the run registry {self.path} cannot be read ({err}); move it aside to start a new one "
                                f"(`lab runs merge RUNS_FOLDER` indexes run folders into it)") from None

    def _connect(self) -> sqlite3.Connection:
        db = sqlite3.connect(self.path, timeout=self.timeout)
        db.row_factory = sqlite3.Row
        return db

    def upsert(self, run_id: str, **fields: Any) -> None:
        """Insert the run or update the given fields; dicts are stored as JSON; `updated_at` is set."""
        unknown = set(fields) - set(COLUMNS)
        if unknown:
            raise ValueError(f"unknown registry column(s) {sorted(unknown)}; accepted: {', '.join(COLUMNS)}")
        fields = {k: json.dumps(v) if isinstance(v, (dict, list)) else v for k, v in fields.items()}
        fields["updated_at"] = now()
        names = ", ".join(f'"{name}"' for name in ["id", *fields])
        marks = ", ".join("?" * (len(fields) + 1))
        updates = ", ".join(f'"{name}" = excluded."{name}"' for name in fields)
        sql = (f"INSERT INTO runs ({names}) VALUES ({marks}) "
               f"ON CONFLICT(id) DO UPDATE SET {updates}")
        db = self._connect()
        try:
            with db:
                db.execute(sql, [run_id, *fields.values()])
        finally:
            db.close()

    def put(self, row: Mapping[str, Any]) -> None:
        """Write a whole row as it is, `updated_at` included (a row read from another registry); its
        columns must be registry columns and include `id`."""
        unknown = set(row) - set(COLUMNS)
        if unknown or "id" not in row:
            raise ValueError(f"a registry row needs 'id' and registry columns only; unknown: {sorted(unknown)}")
        names = ", ".join(f'"{name}"' for name in row)
        marks = ", ".join("?" * len(row))
        db = self._connect()
        try:
            with db:
                db.execute(f"INSERT OR REPLACE INTO runs ({names}) VALUES ({marks})", list(row.values()))
        finally:
            db.close()

    def get(self, run_id: str) -> dict[str, Any] | None:
        """The row of `run_id` as a dict, or None."""
        db = self._connect()
        try:
            row = db.execute("SELECT * FROM runs WHERE id = ?", (run_id,)).fetchone()
        finally:
            db.close()
        return None if row is None else dict(row)

    def rows(self) -> list[dict[str, Any]]:
        """Every row, oldest first."""
        db = self._connect()
        try:
            return [dict(r) for r in db.execute("SELECT * FROM runs ORDER BY created_at, id")]
        finally:
            db.close()
