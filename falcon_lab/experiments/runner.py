"""Running a declared experiment: what is missing, a time budget, snapshots of its finished runs, its report.

`run_experiment` trains the runs of the experiment's plan not yet finished in the results folder (the campaign
machinery skips finished runs and resumes stopped ones from their checkpoints) and writes its tables under
`<results>/experiments/<name>/`. With a budget it asks the campaign to stop when the budget is spent exactly as
Ctrl-C does (SIGINT to this process: each run ends after its current step with a checkpoint there, and the tables
are rewritten), and starts no run after it, so the next call resumes where this one stopped. With a snapshot
folder it writes `<folder>/<name>.tgz` (falcon_lab.archive) every few seconds while it trains and once more at the
end, so a call killed from outside still leaves its finished runs behind; `lab runs merge` reads them back.
"""

from __future__ import annotations

import fcntl
import os
import signal
import socket
import sys
import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from falcon_lab.experiments.declare import CommandFailed, Experiment
from falcon_lab.reproduce.jobs import Job, Outcome
from falcon_lab.runs import Registry, now, run_dir_for

if TYPE_CHECKING:
    from falcon_lab.merge import Merged
    from falcon_lab.reproduce.launch import Campaign

STATES = ("finished", "running", "missing")


def out_folder(experiment: Experiment, results: Path, smoke: bool = False) -> Path:
    """Where an experiment's tables and figures go: `<results>/experiments/<name>` (its smoke run: `.../smoke`)."""
    folder = results / "experiments" / experiment.name
    return folder / "smoke" if smoke else folder


def command_of(experiment: Experiment, smoke: bool = False) -> str:
    """The line that remakes the experiment's tables, printed in them."""
    return f"lab experiment run {experiment.name}" + (" --smoke" if smoke else "")


@dataclass(frozen=True)
class RunState:
    """One planned run and where it stands: `state` one of STATES, `steps` done so far (None: never started)."""

    job: Job
    state: str
    steps: int | None
    max_steps: int

    def line(self) -> str:
        j = self.job
        reach = "not started" if self.steps is None else f"step {self.steps} of {self.max_steps}"
        return f"{self.state:<9} {j.run_id}  {j.label or j.cfg.mixer} seed {j.cfg.train.seed}  ({reach})"


def _locked(folder: Path) -> bool:
    """Whether a process holds the run folder's lock (is training in it), found without creating anything."""
    path = folder / ".lock"
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)
    return False


def run_states(jobs: Sequence[Job], results: Path) -> list[RunState]:
    """Each planned run's state in the results folder: finished (the registry says so), running (its folder is
    locked by a training process), or missing (never started, stopped, failed: the next run makes it)."""
    registry = Registry(results / "lab.db") if (results / "lab.db").is_file() else None
    states = []
    for job in jobs:
        row = registry.get(job.run_id) if registry is not None else None
        steps = None if row is None else int(row.get("steps") or 0)
        if row is not None and row.get("status") == "finished":
            state = "finished"
        elif _locked(run_dir_for(job.run_id, results=results).root):
            state = "running"
        else:
            state = "missing"
        states.append(RunState(job, state, steps, job.cfg.train.max_steps))
    return states


def training_left(states: Sequence[RunState], results: Path) -> tuple[float, int] | None:
    """(seconds of training the runs not finished still need, the finished runs that told it): each at the median
    seconds a step of the finished runs of its mixer (else of all of them), from their `run.json` timings (the
    training loop's, compilation and evaluations included; a stopped run's steps done are not counted again).
    None when no finished run recorded its timings."""
    import statistics

    from falcon_lab.runs import RunDir

    pace: dict[str, list[float]] = {}
    for s in states:
        if s.state != "finished" or not s.steps:
            continue
        timings = RunDir(run_dir_for(s.job.run_id, results=results).root).read_state().get("timings") or {}
        if timings.get("train_s"):
            pace.setdefault(s.job.cfg.mixer, []).append(timings["train_s"] / s.steps)
    if not pace:
        return None
    every = statistics.median(v for values in pace.values() for v in values)
    left = sum(statistics.median(pace.get(s.job.cfg.mixer, [every])) * (s.max_steps - (s.steps or 0))
               for s in states if s.state != "finished")
    return left, sum(len(values) for values in pace.values())


def finished_folders(jobs: Sequence[Job], results: Path) -> list[Path]:
    """The run folders of the finished runs of `jobs`."""
    return [run_dir_for(s.job.run_id, results=results).root for s in run_states(jobs, results)
            if s.state == "finished"]


class Budget:
    """A time limit on this process's campaign: no run starts after `seconds`, and at `seconds` the process
    sends itself SIGINT, which the campaign takes as Ctrl-C (every run stops after its step, with a checkpoint).
    `spent` says whether the limit was reached. None: no limit."""

    def __init__(self, seconds: float | None) -> None:
        if seconds is not None and seconds <= 0:
            raise ValueError(f"--budget must be > 0 seconds, got {seconds:g}")
        self.seconds = seconds
        self.spent = False
        self._timer: threading.Timer | None = None

    def _stop(self) -> None:
        self.spent = True
        os.kill(os.getpid(), signal.SIGINT)

    def __enter__(self) -> Budget:
        from falcon_lab.reproduce.launch import start_within

        if self.seconds is not None:
            start_within(self.seconds)
            self._timer = threading.Timer(self.seconds, self._stop)
            self._timer.daemon = True
            self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        from falcon_lab.reproduce.launch import start_within

        if self._timer is not None:
            self._timer.cancel()
        start_within(None)


class Snapshots:
    """`take()` every `every` seconds in a thread while the block runs, and once more when it ends (however it
    ends). A snapshot that fails (a full disk) is one line on stderr; the campaign goes on."""

    def __init__(self, take: Callable[[], object], every: float) -> None:
        if every <= 0:
            raise ValueError(f"--snapshot-every must be > 0 seconds, got {every:g}")
        self.take, self.every = take, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _safe(self) -> None:
        try:
            self.take()
        except OSError as err:
            print(f"lab experiment: snapshot not written: {err}", file=sys.stderr, flush=True)

    def _loop(self) -> None:
        while not self._stop.wait(self.every):
            self._safe()

    def __enter__(self) -> Snapshots:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self._safe()


@contextmanager
def _nothing() -> Iterator[None]:
    yield


def snapshot_taker(experiment: Experiment, jobs: Sequence[Job], results: Path, out: Path,
                   path: Path, smoke: bool = False) -> Callable[[], int]:
    """A function writing the experiment's snapshot archive `path` (falcon_lab.archive): its finished runs and
    tables, with a manifest naming the experiment, the machine, the commit and the runs; returns the run count."""
    from falcon_lab.archive import write_snapshot
    from falcon_lab.runs import git_state

    commit = git_state().get("commit")

    def take() -> int:
        runs = finished_folders(jobs, results)
        manifest = {"experiment": experiment.name, "smoke": smoke, "written_at": now(), "host": socket.gethostname(),
                    "commit": commit, "planned": len(jobs), "runs": [p.name for p in runs]}
        return write_snapshot(path, runs, out, manifest)

    return take


@dataclass
class Ran:
    """What `run_experiment` did: each part's campaign, in order (a part stopped by the budget, and those after it,
    have none), whether the budget stopped it, the snapshot archive written (None without a snapshot folder) and
    the runs merged in first."""

    campaigns: list[Campaign]
    stopped: bool
    snapshot: Path | None
    merged: list[Merged]

    @property
    def failed(self) -> list[Outcome]:
        return [o for c in self.campaigns for o in c.failed]


def merge_sources(sources: Sequence[Path], results: Path, on_run: Callable[[Merged], None] | None = None
                  ) -> list[Merged]:
    """Merge each folder of runs or snapshot archive of `sources` into `results` (falcon_lab.merge), so the
    campaign skips the runs they hold. ValueError for one that cannot be read."""
    from falcon_lab.merge import merge_results

    merged: list[Merged] = []
    for source in sources:
        merged += merge_results(source, results, on_run=on_run)
    return merged


def declared(experiment: Experiment, smoke: bool = False) -> Experiment:
    """The experiment as it runs here: its smoke size, or its GPU settings where a GPU is visible."""
    if smoke:
        return experiment.smoke()
    from falcon_lab.reproduce.launch import visible_gpus

    return experiment.on_gpu() if visible_gpus() else experiment


def tables(experiment: Experiment, results: Path, smoke: bool = False) -> list[Path]:
    """The main table file of each part."""
    out = out_folder(experiment, results, smoke)
    return [out / part.folder / part.table for part in declared(experiment, smoke).parts]


def run_experiment(experiment: Experiment, results: Path, budget: float | None = None, slots: int = 1,
                   per_gpu: int = 1, gpus_per_run: int = 1, snapshot_dir: Path | None = None,
                   snapshot_every: float = 120.0, merge: Sequence[Path] = (), smoke: bool = False,
                   on_done: Callable[[Outcome], None] | None = None,
                   on_merged: Callable[[Merged], None] | None = None, caches: Path | None = None) -> Ran:
    """Merge `merge` into `results`, then train the experiment's missing runs (`slots` at once), part by part,
    within `budget` seconds, writing each part's tables under `out_folder` and, with `snapshot_dir`, the snapshot
    archive `<snapshot_dir>/<name>.tgz` every `snapshot_every` seconds and at the end. With `caches`, an archive of
    the compilation caches: unpacked into `<results>/cache` first where it exists, and written from there at the
    end, so that the next machine (of the same GPU and versions) compiles nothing the runs here compiled.
    ValueError (before anything trains) for a bad budget, snapshot period, merge source, caches archive or plan."""
    from falcon_lab.archive import extract_archive, write_tree
    from falcon_lab.paths import cache_root

    chosen = declared(experiment, smoke)
    budget_ = Budget(budget)
    jobs = chosen.plan()  # a bad declaration is refused before anything is merged or trained
    out = out_folder(experiment, results, smoke)
    archive = snapshot_dir / f"{experiment.name}.tgz" if snapshot_dir is not None else None
    snapshots = (Snapshots(snapshot_taker(experiment, jobs, results, out, archive, smoke), snapshot_every)
                 if archive is not None else _nothing())
    if caches is not None and not (caches.parent.is_dir() and os.access(caches.parent, os.W_OK)):
        raise ValueError(f"--caches: cannot write {caches}: its folder {caches.parent} is missing or not writable")
    results.mkdir(parents=True, exist_ok=True)
    if caches is not None and caches.exists():
        extract_archive(caches, cache_root(results))
    merged = merge_sources(merge, results, on_merged)
    campaigns: list[Campaign] = []
    try:
        with snapshots, budget_:  # the budget's timer ends before the last snapshot is taken
            for part in chosen.parts:
                campaigns.append(part.campaign(results, out / part.folder, slots, per_gpu, gpus_per_run, False,
                                               command_of(experiment, smoke), on_done))
    except (KeyboardInterrupt, CommandFailed):  # a command stopped by the budget ends as one stopped by Ctrl-C
        if not budget_.spent:
            raise
    finally:
        if caches is not None and cache_root(results).is_dir():
            write_tree(caches, cache_root(results))
    return Ran(campaigns, budget_.spent, archive, merged)


def report(experiment: Experiment, results: Path, smoke: bool = False) -> list[Campaign]:
    """Each part's tables and figures from whatever of its runs exist in `results` (nothing trains).
    ValueError when the folder has no registry."""
    chosen = declared(experiment, smoke)
    out = out_folder(experiment, results, smoke)
    return [part.campaign(results, out / part.folder, 1, 1, 1, True, command_of(experiment, smoke), None)
            for part in chosen.parts]
