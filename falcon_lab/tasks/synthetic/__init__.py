"""Synthetic sequence tasks with a length axis: multi-query associative recall, running parity, and the
composition of permutations of five elements. Each trains on a range of lengths and is tested on longer
held-out ones, so that a rule's strengths can be told from one task's quirks.

Every sample is a pure function of (task options, split, seed, coordinates) (`common.derive_seed`): a
training step's batch depends on (seed, step, global row) alone, so a resumed run draws exactly the
batches an uninterrupted one would and R ranks of b rows slice the same global batch of R·b rows.

Why parity and permutations. Grazzi et al. (2024, "Unlocking state-tracking in linear RNNs through
negative eigenvalues") show that a linear RNN whose state-transition matrices have eigenvalues only in
[0, 1] cannot solve parity at every length with finite precision, and that eigenvalues in (−1, 1) let
it (and, with non-triangular transitions, let products of such matrices track groups like S5). The
Falcon rules write along a direction x with gain β ∈ (0, 2): the state's transition is I − β x xᵀ (up to
decay) for unit x, whose eigenvalue along x is 1 − β. With β ≤ 1 that eigenvalue lies in [0, 1); β > 1
makes it negative, the sign flip parity needs. Whether training reaches β > 1 where the task asks for
it is a question for a longer study; these tasks are where to ask it.
"""

from __future__ import annotations

from typing import Any

from falcon_lab.tasks import SYNTHETIC_TASK_NAMES
from falcon_lab.tasks.synthetic.common import (
    IGNORE_INDEX,
    PAD,
    SPLITS,
    Sample,
    SequenceTask,
    check_lengths,
    derive_seed,
    eval_samples,
    make_batch,
    pad_batch,
    train_samples,
)
from falcon_lab.tasks.synthetic.mqar import MQAR
from falcon_lab.tasks.synthetic.parity import Parity
from falcon_lab.tasks.synthetic.permutation import GROUPS, Permutation

TASK_NAMES = SYNTHETIC_TASK_NAMES


def make_task(name: str, *, vocab_size: int = 256, tokens_per_pair: int = 8, group: str = "S5") -> SequenceTask:
    """The task `name` with its options (`vocab_size`, `tokens_per_pair`: MQAR; `group`: permutation;
    the others ignore them). ValueError naming the option when one is out of range."""
    if name == "mqar":
        return MQAR(vocab_size, tokens_per_pair)
    if name == "parity":
        return Parity()
    if name == "permutation":
        return Permutation(group)
    raise ValueError(f"unknown task {name!r}; accepted: {', '.join(TASK_NAMES)}")


def options_of(task: SequenceTask) -> dict[str, Any]:
    """The options that shape `task`'s samples, for a record's header."""
    if isinstance(task, MQAR):
        return {"vocab_size": task.vocab_size, "tokens_per_pair": task.tokens_per_pair, "power_a": task.power_a}
    if isinstance(task, Permutation):
        return {"group": task.group}
    return {}


__all__ = [
    "GROUPS", "IGNORE_INDEX", "MQAR", "PAD", "SPLITS", "TASK_NAMES", "Parity", "Permutation", "Sample",
    "SequenceTask", "check_lengths", "derive_seed", "eval_samples", "make_batch", "make_task", "options_of",
    "pad_batch", "train_samples",
]
