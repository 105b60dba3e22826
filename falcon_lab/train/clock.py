"""The time a run spends evaluating inside training, kept apart from the time of its steps."""

from __future__ import annotations

from typing import Any


def add_eval_time(pl_module: Any, seconds: float) -> None:
    """Count `seconds` of evaluation inside training on the module (the metrics' `eval_s`, which
    MetricsLogger also keeps out of `tokens_per_s`)."""
    pl_module.eval_seconds = getattr(pl_module, "eval_seconds", 0.0) + seconds
