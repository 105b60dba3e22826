"""Run many independent training runs, up to K at a time, skipping those already finished.

One slot runs in this process, one run after another (no start-up cost per run). K slots run each
run as its own `lab train` process: on a GPU machine of G GPUs slot i sees only GPU i mod G
(CUDA_VISIBLE_DEVICES), so K = G·P puts P runs on each GPU (small models leave most of a GPU idle);
on a CPU the K processes share the cores, each with cores/K threads. With R GPUs a run, each run is
one DDP training over R GPUs (`train.devices` = R, a placement setting: the run id and its data are
those of the one-GPU run) and slot i sees GPUs iR … iR + R − 1 (on a CPU: R processes). Every run
writes its output to `train.log` in its run folder; the registry says how it ended.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from falcon_lab.config import ConfigError, RunConfig, dump_yaml, validate
from falcon_lab.reproduce.jobs import Job, Outcome
from falcon_lab.runs import Registry, run_dir_for

if TYPE_CHECKING:
    from falcon_lab.reproduce.progress import CampaignProgress

# Where this code is imported from: child processes import the very same code.
CODE_ROOT = Path(__file__).resolve().parents[2]
# How long an interrupted child may take to finish its step and write its checkpoint.
STOP_WAIT_S = 60
STOP_CODES = (128 + signal.SIGINT, 128 + signal.SIGTERM)

# A run that fails with CUDA's out-of-memory error, several runs sharing its GPU, is started again (from its last
# checkpoint) up to OOM_RETRIES times, and its GPU takes one run fewer at a time from then on: the runs beside it
# keep going, and it waits for one of them to end.
OOM_RETRIES = 2
OOM_MARKERS = ("CUDA out of memory", "OutOfMemoryError")

# `--start-within S`: the time.monotonic() after which a campaign of this process starts no new run (the runs
# already going finish), so that a call with a fixed budget starts only runs it can end; None: no limit. Runs made
# one after another in this process also start only if a run like them (`expected_seconds`) would end by then.
_START_DEADLINE: float | None = None


def start_within(seconds: float | None) -> None:
    """Let the campaigns of this process start runs only for `seconds` from now (None: always); ValueError for a
    negative time."""
    global _START_DEADLINE
    if seconds is not None and seconds < 0:
        raise ValueError(f"--start-within must be >= 0 seconds, got {seconds:g}")
    _START_DEADLINE = None if seconds is None else time.monotonic() + seconds


def may_start(expected: float = 0.0) -> bool:
    """Whether a campaign may still start a run expected to take `expected` seconds (`start_within`)."""
    return _START_DEADLINE is None or time.monotonic() + expected <= _START_DEADLINE


def expected_seconds(job: Job, took: dict[str, float]) -> float:
    """What the next run should take, from `took` (the longest run of each mixer finished so far in this process):
    its mixer's, else the longest of any; 0 before any has finished."""
    return took.get(job.cfg.mixer, max(took.values(), default=0.0))


def _left_unstarted(jobs: Sequence[Job], expected: float = 0.0) -> None:
    if jobs:
        why = ("its time is up" if not may_start() or not expected else
               f"too little of its time is left for a run of about {expected:.0f} s")
        print(f"--start-within: {why}, so {len(jobs)} run(s) were not started: "
              f"{', '.join(f'{j.label or j.cfg.mixer} seed {j.cfg.train.seed}' for j in jobs)}",
              file=sys.stderr, flush=True)


def log_path(job: Job, results: Path) -> Path:
    """The job's log file, in its run folder."""
    return run_dir_for(job.run_id, results=results).root / "train.log"


def finished_metrics(registry: Registry, run_id: str) -> dict[str, Any] | None:
    """The final metrics of a finished run, or None when the run is not finished."""
    row = registry.get(run_id)
    if row is None or row["status"] != "finished":
        return None
    return json.loads(row["metrics"] or "{}")


def visible_gpus() -> list[str]:
    """Identifiers of the GPUs this process may use, as CUDA_VISIBLE_DEVICES names them; [] without CUDA."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return listed[:count] if listed else [str(i) for i in range(count)]


def slot_gpus(slots: int, per_gpu: int = 1, gpus_per_run: int = 1) -> list[str]:
    """The GPUs `slots` = K × `per_gpu` runs share: the first K visible ones (slot i takes GPU i mod K);
    with `gpus_per_run` R, the first K·R (slot i takes GPUs iR … iR + R − 1)."""
    return visible_gpus()[:-(-slots // per_gpu) * gpus_per_run]


def check_slots(slots: int, per_gpu: int = 1, gpus_per_run: int = 1) -> None:
    """ValueError unless `slots` runs can run at once here: `per_gpu` on each visible GPU at most, or each
    on `gpus_per_run` visible GPUs of its own."""
    if per_gpu < 1:
        raise ValueError(f"--per-gpu must be >= 1, got {per_gpu}")
    if gpus_per_run < 1:
        raise ValueError(f"--gpus-per-run must be >= 1, got {gpus_per_run}")
    if per_gpu > 1 and gpus_per_run > 1:
        raise ValueError(f"--per-gpu {per_gpu} and --gpus-per-run {gpus_per_run}: a run shares its GPU or spans "
                         f"several, not both")
    if slots < 1:
        raise ValueError(f"--gpus must be >= 1, got {slots}")
    gpus = visible_gpus()
    if gpus and slots * gpus_per_run > len(gpus) * per_gpu:
        if gpus_per_run > 1:
            raise ValueError(f"--gpus {slots} --gpus-per-run {gpus_per_run} asks for {slots * gpus_per_run} GPUs, "
                             f"more than the {len(gpus)} visible; accepted: --gpus 1 to "
                             f"{max(1, len(gpus) // gpus_per_run)} with --gpus-per-run up to {len(gpus)}")
        raise ValueError(f"--gpus {slots // per_gpu} asks for more GPUs than the {len(gpus)} visible; "
                         f"accepted: 1 to {len(gpus)}")


def placed(job: Job, gpus_per_run: int) -> RunConfig:
    """The job's configuration trained on `gpus_per_run` devices (one DDP run over them). ValueError for a
    job that asks for another device count itself (`--set train.devices=N`): a campaign places its runs;
    ConfigError where its global batch does not divide among them."""
    t = job.cfg.train
    if t.num_nodes != 1 or t.devices not in (1, gpus_per_run):
        raise ValueError(f"run {job.run_id} sets train.devices={t.devices}, train.num_nodes={t.num_nodes}: a "
                         f"campaign runs on one machine and places each run itself; use --gpus-per-run "
                         f"{t.devices * t.num_nodes} instead")
    cfg = replace(job.cfg, train=replace(t, devices=gpus_per_run))
    try:
        validate(cfg)  # the global batch must divide among the devices
    except ConfigError as err:
        raise ConfigError(f"--gpus-per-run {gpus_per_run}: {err}") from None
    return cfg


def run_jobs(jobs: Sequence[Job], results: Path, slots: int = 1, argv: Sequence[str] | None = None,
             on_done: Callable[[Outcome], None] | None = None, per_gpu: int = 1,
             gpus_per_run: int = 1, progress: CampaignProgress | None = None) -> list[Outcome]:
    """Make every job not yet finished in `<results>/lab.db`, up to `slots` at once, each on `gpus_per_run`
    devices; `on_done(outcome)` is called as each ends (skipped jobs first), and `progress` hears of the
    jobs to make and of each start. Returns the outcomes in the order the jobs ended."""
    if slots < 1:
        raise ValueError(f"--gpus must be >= 1, got {slots}")
    for job in jobs:  # before anything runs
        placed(job, gpus_per_run)
    results = Path(results).resolve()
    registry = Registry(results / "lab.db")
    outcomes: list[Outcome] = []

    def done(outcome: Outcome) -> None:
        outcomes.append(outcome)
        if on_done is not None:
            on_done(outcome)

    todo = []
    for job in jobs:
        metrics = finished_metrics(registry, job.run_id)
        if metrics is None:
            todo.append(job)
        else:
            done(Outcome(job, "skipped", metrics=metrics))
    started = progress.started if progress is not None else None
    if progress is not None:
        progress.begin(todo, results)
    try:
        if slots == 1 and gpus_per_run == 1:
            took: dict[str, float] = {}  # the longest finished run of each mixer, in seconds
            for i, job in enumerate(todo):
                expected = expected_seconds(job, took)
                if not may_start(expected):
                    _left_unstarted(todo[i:], expected)
                    break
                if started is not None:
                    started(job)
                outcome = _run_here(job, results, registry, argv)
                if outcome.status == "finished":
                    took[job.cfg.mixer] = max(took.get(job.cfg.mixer, 0.0), outcome.seconds)
                done(outcome)
                if outcome.status == "stopped":  # by SIGINT or SIGTERM, at a checkpoint: no new run starts
                    raise KeyboardInterrupt(f"{outcome.job.label}: stopped by a signal")
        else:  # a DDP run starts its other ranks by running its own command again: a `lab train` of its own
            _run_in_processes(todo, results, registry, slots, done, per_gpu, gpus_per_run, started)
    finally:
        if progress is not None:
            progress.end()
    return outcomes


@dataclass
class Campaign:
    """What a table-building command (`lab reproduce`, `lab ablate`) did: each job's outcome, where its
    tables are, and how many of the planned runs have finished."""

    outcomes: list[Outcome]
    out: Path
    finished: int
    planned: int
    jobs: Sequence[Job] = ()  # the planned jobs
    results: Path | None = None  # the folder of their runs and registry
    figures: list[Path] = field(default_factory=list)  # drawn from the tables

    @property
    def failed(self) -> list[Outcome]:
        return [o for o in self.outcomes if o.status == "failed"]


def run_campaign(jobs: Sequence[Job], planned: Sequence[Job],
                 write_tables: Callable[[Sequence[Job], Path, Path, str], int], results: Path, out: Path,
                 slots: int, command: str, on_done: Callable[[Outcome], Any] | None = None,
                 per_gpu: int = 1, table_only: bool = False, gpus_per_run: int = 1,
                 progress: CampaignProgress | None = None) -> Campaign:
    """Run `jobs` (up to `slots` at once, each on `gpus_per_run` devices) and rewrite the tables of everything
    `planned` after each one, so a stopped campaign keeps a table of what finished; `write_tables` returns the
    finished count.

    `table_only` trains nothing: the tables are written from the runs already in `results` (runs made on
    other machines and copied in, or a campaign to be read before it ends); ValueError when `results` has
    no registry to read them from."""
    if table_only:
        if not (results / "lab.db").is_file():
            raise ValueError(f"--table-only: no registry {results / 'lab.db'}, so no runs to make a table of")
        return Campaign([], out, write_tables(planned, results, out, command), len(planned), planned, results)

    def done(outcome: Outcome) -> None:
        write_tables(planned, results, out, command)
        if on_done is not None:
            on_done(outcome)

    try:
        outcomes = run_jobs(jobs, results, slots=slots, argv=command.split(), on_done=done, per_gpu=per_gpu,
                            gpus_per_run=gpus_per_run, progress=progress)
    except KeyboardInterrupt:
        write_tables(planned, results, out, command)  # with the runs just stopped at their last evaluation
        raise
    finished = write_tables(planned, results, out, command)
    return Campaign(outcomes, out, finished, len(planned), planned, results)


def _quiet_lightning() -> None:
    """Keep Lightning's banners and known deprecation chatter out of the output."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*treespec.*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")


def _run_here(job: Job, results: Path, registry: Registry, argv: Sequence[str] | None) -> Outcome:
    from falcon_lab.eval.training import evaluation_callbacks
    from falcon_lab.train import run_training

    _quiet_lightning()
    log = log_path(job, results)
    log.parent.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    with log.open("a", encoding="utf-8") as f, contextlib.redirect_stdout(f), contextlib.redirect_stderr(f):
        try:
            result = run_training(job.cfg, results=results, progress=False, argv=argv, stop_on_interrupt=True,
                                  evaluations=evaluation_callbacks)
        except Exception as err:  # one run's failure must not stop the others
            print(f"{type(err).__name__}: {err}", file=f)
            return Outcome(job, "failed", time.perf_counter() - start, _first_line(str(err)))
    seconds = time.perf_counter() - start
    if result.status == "skipped":
        return Outcome(job, "skipped", seconds, metrics=result.metrics)
    return Outcome(job, result.status, seconds, metrics=result.metrics)


def _child_env(slot: int, slots: int, gpus: list[str], gpus_per_run: int = 1) -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(CODE_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    if gpus:
        first = slot * gpus_per_run % len(gpus)
        env["CUDA_VISIBLE_DEVICES"] = ",".join(gpus[first:first + gpus_per_run])
    else:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // (slots * gpus_per_run)))
    return env


def _run_in_processes(jobs: Sequence[Job], results: Path, registry: Registry, slots: int,
                      done: Callable[[Outcome], None], per_gpu: int = 1, gpus_per_run: int = 1,
                      started: Callable[[Job], None] | None = None) -> None:
    gpus = slot_gpus(slots, per_gpu, gpus_per_run)
    pending = deque(jobs)
    free = list(range(slots))
    running: dict[int, tuple[Job, subprocess.Popen, float, Any]] = {}
    device = {slot: _child_env(slot, slots, gpus, gpus_per_run).get("CUDA_VISIBLE_DEVICES", "") for slot in free}
    cap: dict[str, int] = {}  # runs a GPU takes at once, lowered by an out-of-memory failure there
    retries: dict[str, int] = {}

    def startable() -> int | None:
        """A free slot whose GPU is under its cap, or None."""
        for slot in free:
            busy = sum(device[s] == device[slot] for s in running)
            if busy < cap.get(device[slot], slots):
                return slot
        return None

    with _stops_on_signals() as got, tempfile.TemporaryDirectory(prefix="lab-reproduce-") as configs:
        try:
            while pending or running:
                if pending and not may_start():
                    _left_unstarted(list(pending))
                    pending.clear()
                while pending and (slot := startable()) is not None:
                    job = pending.popleft()
                    free.remove(slot)
                    path = Path(configs) / f"{job.run_id}.yaml"
                    path.write_text(dump_yaml(placed(job, gpus_per_run)), encoding="utf-8")
                    log = log_path(job, results)
                    log.parent.mkdir(parents=True, exist_ok=True)
                    f = log.open("a", encoding="utf-8")
                    proc = subprocess.Popen(_train_command(path, results), stdout=f, stderr=subprocess.STDOUT,
                                            env=_child_env(slot, slots, gpus, gpus_per_run))
                    running[slot] = (job, proc, time.perf_counter(), f)
                    if started is not None:
                        started(job)
                time.sleep(0.2)
                for slot, (job, proc, start, f) in list(running.items()):
                    if proc.poll() is None:
                        continue
                    f.close()
                    del running[slot]
                    free.append(slot)
                    outcome = _process_outcome(job, proc.returncode, time.perf_counter() - start, results, registry)
                    others = sum(device[s] == device[slot] for s in running)
                    if (outcome.status == "failed" and others and retries.get(job.run_id, 0) < OOM_RETRIES
                            and any(m in (outcome.message or "") for m in OOM_MARKERS)):
                        retries[job.run_id] = retries.get(job.run_id, 0) + 1
                        cap[device[slot]] = others  # this GPU held one run too many
                        logging.getLogger(__name__).warning(
                            "%s: CUDA out of memory with %d other run(s) on its GPU; it starts again from its last "
                            "checkpoint when one of them ends (retry %d of %d), %d run(s) on that GPU from now on",
                            job.label, others, retries[job.run_id], OOM_RETRIES, others)
                        pending.appendleft(job)
                        continue
                    done(outcome)
        finally:
            # Interrupted: each child is passed the signal and ends its run after the current step with a
            # checkpoint there (`lab train` stops so on SIGINT and SIGTERM), so the next call resumes it exactly.
            for job, proc, _, f in running.values():
                if proc.poll() is None:
                    proc.send_signal(got.get("signum", signal.SIGINT))
            for job, proc, _, f in running.values():
                try:
                    proc.wait(timeout=STOP_WAIT_S)
                except subprocess.TimeoutExpired:
                    proc.kill()
                f.close()


def _train_command(config: Path, results: Path) -> list[str]:
    """The child process of one run: `lab train` of its config into the campaign's results."""
    return [sys.executable, "-m", "falcon_lab", "train", "--config", str(config), "--results", str(results), "--no-progress"]


@contextlib.contextmanager
def _stops_on_signals() -> Iterator[dict[str, int]]:
    """SIGINT and SIGTERM raise KeyboardInterrupt here, SIGINT even where it was inherited ignored (a campaign
    started in the background by a script, as `timeout --signal=INT ... &` does), so no new run starts after
    one; the dict yielded names the signal received ("signum"), for the children to be passed the same."""
    import threading

    got: dict[str, int] = {}
    if threading.current_thread() is not threading.main_thread():
        yield got
        return

    def stop(signum: int, frame: object) -> None:
        got.setdefault("signum", signum)
        raise KeyboardInterrupt(f"signal {signum}")

    previous = {signum: signal.signal(signum, stop) for signum in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield got
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)


def _process_outcome(job: Job, code: int, seconds: float, results: Path, registry: Registry) -> Outcome:
    row = registry.get(job.run_id) or {}
    status = row.get("status")
    metrics = json.loads(row.get("metrics") or "{}")
    # `lab train` stopped by a signal exits 128 + its number, its run resumable at its last step.
    if status in ("finished", "stopped") and (code == 0 or status == "stopped" and code in STOP_CODES):
        return Outcome(job, status, seconds, metrics=metrics)
    message = row.get("message") or _last_line(log_path(job, results)) or f"exit code {code}"
    return Outcome(job, "failed", seconds, _first_line(message))


def _first_line(text: str) -> str:
    return text.strip().splitlines()[0] if text.strip() else ""


def _last_line(path: Path) -> str:
    try:
        lines = [line for line in path.read_text(encoding="utf-8", errors="replace").splitlines() if line.strip()]
    except OSError:
        return ""
    return lines[-1] if lines else ""
