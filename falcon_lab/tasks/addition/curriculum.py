"""Width curricula for addition training: the width range of a step's batch, a pure function of the step.

Because the range depends on the step alone, a run resumed at step s draws exactly the batches an
uninterrupted run would.
"""

from __future__ import annotations

from falcon_lab.tasks.addition.generate import check_digits


def linear_widths(step: int, widths: tuple[int, int], start_width: int, ramp_steps: int) -> tuple[int, int]:
    """The width range (inclusive) of the batch of `step` (0-based) under a linear ramp.

    The widest width grows from `start_width` at step 0 to `widths[1]` at step `ramp_steps`, by
    equal shares of the ramp, and stays there; the narrowest is always `widths[0]`.
    """
    lo, hi = check_digits(widths, "widths")
    if not lo <= start_width <= hi:
        raise ValueError(f"start_width={start_width} must lie in widths [{lo}, {hi}]")
    if ramp_steps < 1:
        raise ValueError(f"ramp_steps must be >= 1, got {ramp_steps}")
    if step < 0:
        raise ValueError(f"step must be >= 0, got {step}")
    return lo, start_width + (hi - start_width) * min(step, ramp_steps) // ramp_steps
