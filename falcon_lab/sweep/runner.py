"""`lab sweep run`: check the space, create or resume the study, start K workers, follow the trials.

Worker k sees one GPU (CUDA_VISIBLE_DEVICES; workers share GPUs round-robin when there are more workers
than GPUs); on a CPU machine the K workers share the cores. Each writes its output to
`<results>/sweeps/<study>/logs/`. Stopping (Ctrl-C) fails the running trials; running the same command
again resumes the study with the trials still owed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import optuna
from optuna.trial import FrozenTrial, TrialState

from falcon_lab.sweep.space import load_space
from falcon_lab.sweep.spec import SweepSpec, check_space, check_spec
from falcon_lab.sweep.storage import counted, fail_dead_trials, open_storage, redact
from falcon_lab.sweep.study import grid_size, make_pruner, make_sampler, open_study, record_command
from falcon_lab.sweep.worker import base_steps

# Where this code is imported from: workers import the very same code.
CODE_ROOT = Path(__file__).resolve().parents[2]
FINISHED = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


@dataclass
class SweepOutcome:
    """How `run_sweep` ended: trial counts by state, the budget, and each worker's exit code."""

    counts: dict[str, int]
    budget: int
    exit_codes: list[int] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        return sum(self.counts.get(s.name, 0) for s in FINISHED) >= self.budget


def visible_gpus() -> list[str]:
    """The GPUs this process may use, as CUDA_VISIBLE_DEVICES names them; [] without CUDA."""
    import torch

    count = torch.cuda.device_count() if torch.cuda.is_available() else 0
    listed = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return listed[:count] if listed else [str(i) for i in range(count)]


def worker_env(index: int, workers: int, gpus: list[str]) -> dict[str, str]:
    """The environment of worker `index`: its GPU, or its share of the CPU cores."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(CODE_ROOT), *filter(None, [env.get("PYTHONPATH")])])
    if gpus:
        env["CUDA_VISIBLE_DEVICES"] = gpus[index % len(gpus)]
    elif "OMP_NUM_THREADS" not in env:
        env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // workers))
    return env


def counts_by_state(trials: list[FrozenTrial]) -> dict[str, int]:
    out: dict[str, int] = {}
    for t in trials:
        out[t.state.name] = out.get(t.state.name, 0) + 1
    return out


def describe_trial(t: FrozenTrial, names: list[str]) -> str:
    """One line: number, state, value(s), parameters, and the error of a failed trial."""
    if t.values is not None:
        result = "  ".join(f"{n} {v:.4g}" for n, v in zip(names, t.values))
    elif t.state == TrialState.PRUNED and t.intermediate_values:
        step = max(t.intermediate_values)
        result = f"at step {step}: {names[0]} {t.intermediate_values[step]:.4g}"
    else:
        result = ""
    params = " ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in t.params.items())
    error = f"  ({t.user_attrs['error']})" if t.state != TrialState.COMPLETE and "error" in t.user_attrs else ""
    return f"trial {t.number} {t.state.name.lower()}  {result}  {params}{error}".replace("    ", "  ")


def run_sweep(spec: SweepSpec, workers: int = 1, echo: Callable[[str], None] = print,
              poll_seconds: float = 2.0) -> SweepOutcome:
    """Run (or resume) the sweep `spec` with `workers` worker processes on this machine until the study
    has `spec.trials` trials, echoing each trial as it ends. ValueError (SpaceError, StudyMismatch)
    before anything starts when the space or the options are not accepted."""
    check_spec(spec)
    optuna.logging.set_verbosity(optuna.logging.WARNING)  # this process echoes trials itself
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    space = load_space(spec.space)
    check_space(spec, space)
    if spec.sampler in ("grid", "bruteforce") and spec.trials > grid_size(space):
        raise ValueError(f"--trials {spec.trials} exceeds the {grid_size(space)} points of the grid of "
                         f"{space.path}; accepted: --trials <= {grid_size(space)}")
    sampler, pruner = make_sampler(spec, space), make_pruner(spec, *base_steps(spec, space))
    storage = open_storage(spec.storage, spec.heartbeat)
    study = open_study(spec, storage, space, sampler, pruner, create=True)
    record_command(study, spec)
    for number in fail_dead_trials(study, storage):
        echo(f"trial {number}: its worker is gone; marked FAIL")
    trials = study.get_trials(deepcopy=False)
    names = spec.metric_names
    seen = {t.number for t in trials if t.state in FINISHED}
    owed = spec.trials - counted(trials)
    if trials:
        echo(f"study {spec.study}: {len(trials)} trials so far ({_counts_text(counts_by_state(trials))}); "
             f"budget {spec.trials}")
    if owed <= 0:
        echo(f"study {spec.study} has used its budget of {spec.trials} trials; nothing to run "
             f"(raise --trials to run more)")
        return SweepOutcome(counts_by_state(trials), spec.trials)
    workers = min(workers, owed)
    gpus = visible_gpus()
    where = f"GPU {', '.join(gpus)}" if gpus else "CPU"
    if gpus and workers > len(gpus):
        where += f"; {workers} workers share {len(gpus)} GPUs in turn"
    echo(f"study {spec.study}: {owed} trials to run on {workers} worker(s) ({where}); storage {redact(spec.storage)}")
    procs = _start_workers(spec, workers, gpus)
    codes: list[int] = []
    # SIGTERM stops the sweep as Ctrl-C does: the workers are told to stop, not left running.
    previous = signal.signal(signal.SIGTERM, _interrupt)
    try:
        while any(p.poll() is None for p in procs):
            time.sleep(poll_seconds)
            seen |= _echo_new(study, seen, names, echo)
    except KeyboardInterrupt:
        echo("stopping: the running trials are marked FAIL; run the same command again to resume")
        for p in procs:
            if p.poll() is None:
                p.send_signal(signal.SIGTERM)
        for p in procs:
            try:
                p.wait(timeout=60)
            except subprocess.TimeoutExpired:
                p.kill()
        for number in fail_dead_trials(study, storage):
            echo(f"trial {number}: its worker is gone; marked FAIL")
        _echo_new(study, seen, names, echo)
        raise
    finally:
        signal.signal(signal.SIGTERM, previous)
        codes = [p.wait() for p in procs]
    for number in fail_dead_trials(study, storage):
        echo(f"trial {number}: its worker is gone; marked FAIL")
    _echo_new(study, seen, names, echo)
    for i, code in enumerate(codes):
        if code != 0:
            how = f"signal {-code}" if code < 0 else f"exit code {code}"
            echo(f"worker {i} ended with {how}; its log: {_log_path(spec, i)}")
    trials = study.get_trials(deepcopy=False)
    return SweepOutcome(counts_by_state(trials), spec.trials, codes)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def _counts_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{n} {state.lower()}" for state, n in sorted(counts.items()))


def _log_path(spec: SweepSpec, index: int) -> Path:
    return spec.study_dir / "logs" / f"{socket.gethostname()}-worker{index}.log"


def _start_workers(spec: SweepSpec, workers: int, gpus: list[str]) -> list[subprocess.Popen]:
    procs = []
    for i in range(workers):
        log = _log_path(spec, i)
        log.parent.mkdir(parents=True, exist_ok=True)
        with log.open("a", encoding="utf-8") as f:
            # The spec goes through stdin: a database URL may hold a password, which argv would show to `ps`.
            proc = subprocess.Popen([sys.executable, "-m", "falcon_lab.sweep.worker", str(i)], stdout=f,
                                    stderr=subprocess.STDOUT, stdin=subprocess.PIPE, text=True,
                                    env=worker_env(i, workers, gpus))
            proc.stdin.write(spec.to_json())
            proc.stdin.close()
            procs.append(proc)
    return procs


def _echo_new(study: optuna.Study, seen: set[int], names: list[str], echo: Callable[[str], None]) -> set[int]:
    new = set()
    for t in study.get_trials(deepcopy=False, states=FINISHED):
        if t.number not in seen:
            echo(describe_trial(t, names))
            new.add(t.number)
    seen |= new
    return new
