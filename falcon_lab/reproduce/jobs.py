"""A campaign's jobs and how each ended: what the launcher runs, the progress reports and the tables read."""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cached_property
from typing import Any

from falcon_lab.config import RunConfig, config_hash
from falcon_lab.task import task_of


@dataclass(frozen=True)
class Job:
    """One run to make: its configuration and the labels it is reported under."""

    cfg: RunConfig
    label: str = ""

    @cached_property
    def run_id(self) -> str:  # read many times by every table rewrite: hashed once (a job's config is never changed after it is made)
        return config_hash(self.cfg)


@dataclass
class Outcome:
    """How a job ended: status "finished", "skipped" (finished before), "stopped" or "failed"."""

    job: Job
    status: str
    seconds: float = 0.0
    message: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)


def outcome_line(outcome: Outcome) -> str:
    """One line for a user: the job's label, seed and run id, how it ended, and its best evaluation (over the
    run's validation and held-out widths, `eval.widths` and `eval.held_out_from`)."""
    job, m = outcome.job, outcome.metrics
    head = f"{job.label or job.cfg.mixer} seed {job.cfg.train.seed} (run {job.run_id}):"
    if outcome.status == "failed":
        return f"{head} failed after {outcome.seconds:.0f} s: {outcome.message}"
    took = "finished before" if outcome.status == "skipped" else f"{outcome.status} in {outcome.seconds:.0f} s"
    names = task_of(job.cfg.task).outcome_scores(job.cfg)
    scores = "  ".join(f"{name} {m[key]:.1f}" for key, name in names if m.get(key) is not None)
    step = f"best step {m['best_step']:.0f}  " if m.get("best_step") is not None else ""
    return f"{head} {took}  {step}{scores}"
