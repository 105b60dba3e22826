"""A sweep worker: one process that runs trials one after another until the study's budget is used.

Started by `lab sweep run` as `python -m falcon_lab.sweep.worker INDEX` with the sweep's spec (JSON) on stdin,
its GPU chosen through CUDA_VISIBLE_DEVICES and its output sent to a log file.
"""

from __future__ import annotations

import logging
import signal
import sys
import warnings

import optuna
from optuna.trial import FrozenTrial, TrialState

from falcon_lab.sweep.objective import Objective
from falcon_lab.sweep.space import Space, load_space
from falcon_lab.sweep.spec import SweepSpec, first_value, trial_config
from falcon_lab.sweep.storage import budget_lock, counted, fail_dead_trials, open_storage
from falcon_lab.sweep.study import make_pruner, make_sampler, open_study

# A worker whose trials keep failing stops rather than spend the whole budget on one mistake.
MAX_FAILURES_IN_A_ROW = 3


def base_steps(spec: SweepSpec, space: Space) -> tuple[int, int | None]:
    """The evaluation interval of the trials and their length (None when the space searches it)."""
    cfg = trial_config(spec, space, space.active_values(first_value))
    fixed_length = "train.max_steps" not in space.keys()  # noqa: SIM118 (Space.keys is a method of ours)
    return cfg.train.val_every, cfg.train.max_steps if fixed_length else None


def work(spec: SweepSpec, index: int = 0) -> int:
    """Run trials of `spec`'s study until it has `spec.trials` started trials; returns 0, or 1 when this
    worker stopped after MAX_FAILURES_IN_A_ROW failed trials."""
    space = load_space(spec.space)
    storage = open_storage(spec.storage, spec.heartbeat)
    pruner = make_pruner(spec, *base_steps(spec, space))
    study = open_study(spec, storage, space, make_sampler(spec, space, index), pruner)
    ended: list[FrozenTrial] = []
    failures = 0
    while True:
        with budget_lock(spec.storage, spec.study) as lock:
            for number in fail_dead_trials(study, storage):
                print(f"trial {number}: its worker is gone; marked FAIL", flush=True)
            if counted(study.get_trials(deepcopy=False)) >= spec.trials:
                return 0
            # The trial is created under the lock; the objective lets go of it as soon as the trial exists.
            objective = Objective(spec, space, on_start=lock.release)
            study.optimize(objective, n_trials=1, catch=(Exception,), gc_after_trial=True,
                           callbacks=[lambda _study, trial: ended.append(trial)])
        failures = failures + 1 if ended and ended[-1].state == TrialState.FAIL else 0
        if failures >= MAX_FAILURES_IN_A_ROW:
            print(f"worker {index}: {failures} trials in a row failed (last: "
                  f"{ended[-1].user_attrs.get('error', 'no message')}); stopping", flush=True)
            return 1


def _quiet() -> None:
    """Keep Lightning's banners and known deprecation chatter out of the worker's log."""
    for name in ("lightning.pytorch", "lightning.fabric", "lightning"):
        logging.getLogger(name).setLevel(logging.WARNING)
    warnings.filterwarnings("ignore", message=".*treespec.*LeafSpec.*")
    warnings.filterwarnings("ignore", message=".*does not have many workers.*")
    warnings.filterwarnings("ignore", category=optuna.exceptions.ExperimentalWarning)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str]) -> int:
    # Stopped by SIGTERM (from `lab sweep run`) or SIGINT, the running trial is told FAIL before the
    # worker exits; a process started in the background inherits SIGINT ignored, hence both.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGINT, _interrupt)
    if len(argv) != 1 or not argv[0].isdigit():
        print("usage: python -m falcon_lab.sweep.worker INDEX < SPEC_JSON", file=sys.stderr)
        return 2
    spec = SweepSpec.from_json(sys.stdin.read())
    import lightning  # noqa: F401  (imported first: it sets its own log levels, which _quiet overrides)

    _quiet()
    try:
        return work(spec, int(argv[0]))
    except KeyboardInterrupt:
        print("worker stopped; its running trial is marked FAIL", flush=True)
        return 130


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
