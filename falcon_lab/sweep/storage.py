"""Where a study lives, the lock that keeps its trial budget exact, and who runs each trial.

Storage: a journal file (`<study>/journal.log`, the default: Optuna advises against SQLite for parallel
workers) or a database URL (PostgreSQL for workers on several machines; SQLite on one). Database
storages record a heartbeat of every running trial; a trial whose heartbeat stops (its worker died)
is failed by the next worker or rerun once the grace period has passed.

Budget: `--trials N` counts every trial that was started (running, complete, pruned or failed). A
worker takes the budget lock, counts, and creates its trial before it lets go, so K workers on any
number of machines start exactly N trials between them.

Workers: each trial records its worker (host, boot, pid and process start time). A running trial whose
worker process is gone from this machine is marked FAIL at once, without waiting for a heartbeat.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import optuna
from optuna.trial import FrozenTrial, TrialState

SCHEMES = ("postgresql", "postgres", "sqlite")
# A trial whose worker is unknown this long after it started was created by a worker that died before
# it could record itself (the window is milliseconds; this leaves a wide margin).
ORPHAN_SECONDS = 120.0


def is_url(storage: str) -> bool:
    return "://" in storage


def redact(storage: str) -> str:
    """`storage` with the password of a database URL replaced by ***, for anything printed or recorded."""
    return re.sub(r"://([^:/@]*):[^@/]*@", r"://\1:***@", storage)


def database_url(url: str) -> str:
    """`url` with the PostgreSQL driver that is installed named (psycopg, else psycopg2), so a plain
    `postgresql://` works with either; ValueError for schemes other than PostgreSQL and SQLite."""
    scheme, _, rest = url.partition("://")
    dialect, _, driver = scheme.partition("+")
    if dialect not in SCHEMES:
        raise ValueError(f"--storage {url!r}: scheme {scheme!r} is not accepted; accepted: postgresql://USER:PASS@HOST"
                         f"/DB, sqlite:///PATH, or a journal file path")
    if dialect == "sqlite" or driver:
        return url
    import importlib.util

    for module, name in (("psycopg", "psycopg"), ("psycopg2", "psycopg2")):
        if importlib.util.find_spec(module) is not None:
            return f"postgresql+{name}://{rest}"
    raise ValueError("--storage postgresql://... needs a PostgreSQL driver: pip install psycopg2-binary")


def open_storage(storage: str, heartbeat: int = 60) -> optuna.storages.BaseStorage:
    """The Optuna storage `storage` names: a database URL or a journal file path."""
    if is_url(storage):
        import warnings

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            return optuna.storages.RDBStorage(database_url(storage), heartbeat_interval=heartbeat,
                                              grace_period=3 * heartbeat, engine_kwargs={"pool_pre_ping": True})
    from optuna.storages.journal import JournalFileBackend

    path = Path(storage)
    path.parent.mkdir(parents=True, exist_ok=True)
    return optuna.storages.JournalStorage(JournalFileBackend(str(path)))


@contextlib.contextmanager
def budget_lock(storage: str, study: str) -> Iterator[BudgetLock]:
    """Hold the study's budget lock: a PostgreSQL advisory lock, or an flock beside the journal or
    SQLite file. Either is let go when its holder dies, however it dies."""
    if is_url(storage) and not storage.startswith("sqlite"):
        lock: BudgetLock = _AdvisoryLock(database_url(storage), study)
    else:
        path = storage.split("///", 1)[1] if is_url(storage) else storage
        lock = _FileLock(Path(f"{path}.{_safe(study)}.budget.lock"))
    lock.acquire()
    try:
        yield lock
    finally:
        lock.release()


class BudgetLock:
    """A lock whose `release` may be called early (by the trial it guarded) and again at exit."""

    def acquire(self) -> None:
        raise NotImplementedError

    def release(self) -> None:
        raise NotImplementedError


class _FileLock(BudgetLock):
    def __init__(self, path: Path) -> None:
        self.path, self.fd = path, None

    def acquire(self) -> None:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o666)
        fcntl.flock(self.fd, fcntl.LOCK_EX)

    def release(self) -> None:
        if self.fd is not None:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


class _AdvisoryLock(BudgetLock):
    def __init__(self, url: str, study: str) -> None:
        import sqlalchemy

        # One 64-bit key per study name, shared by every machine.
        self.key = int.from_bytes(hashlib.sha256(f"lab-sweep:{study}".encode()).digest()[:8], "big", signed=True)
        self.engine = sqlalchemy.create_engine(url, poolclass=sqlalchemy.pool.NullPool)
        self.conn: Any = None

    def acquire(self) -> None:
        import sqlalchemy

        self.conn = self.engine.connect()
        self.conn.execute(sqlalchemy.text("SELECT pg_advisory_lock(:k)"), {"k": self.key})

    def release(self) -> None:
        if self.conn is not None:
            import sqlalchemy

            self.conn.execute(sqlalchemy.text("SELECT pg_advisory_unlock(:k)"), {"k": self.key})
            self.conn.close()
            self.conn = None
            self.engine.dispose()


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in name)


def counted(trials: list[FrozenTrial]) -> int:
    """How many trials count toward the budget: every one started (all but WAITING)."""
    return sum(t.state != TrialState.WAITING for t in trials)


def _boot_id() -> str:
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip()[:8]
    except OSError:
        return "noboot"


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (Linux), None when there is no such process
    or it is a zombie; "?" where /proc is missing and only the pid's existence can be checked."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return None
    except OSError:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return None
        except PermissionError:
            pass
        return "?"
    fields = stat.rsplit(")", 1)[1].split()
    return None if fields[0] == "Z" else fields[19]


def machine() -> str:
    """This machine: host name and boot id (pids mean something only within one boot of one host)."""
    return f"{socket.gethostname()}/{_boot_id()}"


def worker_id(pid: int | None = None) -> str:
    """`machine:pid:start` of a process (default: this one)."""
    pid = os.getpid() if pid is None else pid
    return f"{machine()}:{pid}:{_start_time(pid)}"


def worker_alive(worker: str) -> bool | None:
    """Whether a worker recorded by `worker_id` still runs; None when it ran on another machine."""
    host, pid, start = worker.rsplit(":", 2)
    if host != machine():
        return None
    now = _start_time(int(pid))
    return now is not None and (now == start or "?" in (now, start))


def fail_dead_trials(study: optuna.Study, storage: optuna.storages.BaseStorage) -> list[int]:
    """Mark FAIL each running trial of `study` (held in `storage`) whose worker is gone from this
    machine (or never recorded itself), and let the storage fail those whose heartbeat stopped;
    returns the numbers failed here."""
    import datetime
    import warnings

    if isinstance(storage, optuna.storages.RDBStorage):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            optuna.storages.fail_stale_trials(study)
    failed = []
    now = datetime.datetime.now()
    for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,)):
        worker = t.user_attrs.get("worker")
        if worker is None:
            started = t.datetime_start or now
            dead = (now - started).total_seconds() > ORPHAN_SECONDS
            reason = "its worker died before recording itself"
        else:
            dead = worker_alive(worker) is False
            reason = f"its worker {worker} is gone"
        if not dead:
            continue
        # Storages address trials by their id, which Optuna keeps in FrozenTrial._trial_id only.
        try:
            storage.set_trial_user_attr(t._trial_id, "error", f"worker lost: {reason}")
            if storage.set_trial_state_values(t._trial_id, state=TrialState.FAIL):
                failed.append(t.number)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # another worker failed it first
    return failed
