"""What a task is to the lab: one ``Task`` object per task, and the registry every command asks.

A task knows its typed options (the ``data.*`` keys of ``falcon_lab.config.DataConfig`` it reads, checked by
``check``), its batches (``train_batch``, ``val_batches``), its evaluation (``evaluations``), the inputs it
gives the model beyond the tokens (``model_inputs``, the one hook the language model takes them through) and,
for a task with a length axis, its samples and table (``LengthTask``). Configuration, training, ``lab data``,
``lab train --task``, ``lab reproduce`` and ``lab ablate`` read the task off the registry and never branch on
its name: registering a task (``register_task``) is the one step that adds it to all of them.

The data themselves come from ``falcon_lab.tasks`` (generators that know nothing of models); this package is
where the lab meets them. Nothing heavy is imported here: each method imports what it needs.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

from falcon_lab.typed import ConfigError

if TYPE_CHECKING:
    from falcon_lab.config import RunConfig
    from falcon_lab.mixers import PositionsConfig
    from falcon_lab.runs import RunDir
    from falcon_lab.tasks.synthetic import SequenceTask

Batch = tuple[Any, Any]  # (input_ids, labels): int64 tensors [rows, seq_len]


class Task:
    """One task of the lab. A subclass sets ``name`` and overrides what differs from these defaults.

    options: the ``data.*`` keys it reads (typed by ``DataConfig``), for the documentation and the tables.
    curriculum_range: the ``data.*`` range ``data.curriculum`` ramps (None: the task takes no curriculum).
    packs: whether it takes ``data.packing``. evaluates: whether ``eval.enabled`` applies.
    model_options: the ``model.*`` keys of the inputs it gives the model (``model_inputs``).
    """

    name: str = ""
    summary: str = ""
    options: tuple[str, ...] = ()
    curriculum_range: str | None = None
    packs: bool = False
    evaluates: bool = False
    model_options: tuple[str, ...] = ()

    def check(self, cfg: RunConfig) -> None:
        """ConfigError, one line naming the option, when the run's task options are not the task's to take."""

    def vocab_size(self, cfg: RunConfig) -> int:
        """The vocabulary the task's tokens need."""
        return cfg.data.vocab_size

    def seq_len(self, cfg: RunConfig) -> int:
        """Positions per row when ``data.seq_len`` is null."""
        raise NotImplementedError

    def train_batch(self, cfg: RunConfig, step: int, rank: int, world_size: int) -> Batch:
        """(input_ids, labels) of ``step`` for ``rank``: a pure function of (config, step, global rows)."""
        raise NotImplementedError

    def val_batches(self, cfg: RunConfig) -> list[Batch] | None:
        """The fixed validation set in batches of at most ``train.batch_size`` rows; None: nothing to validate."""
        return None

    def evaluations(self, cfg: RunConfig, run: RunDir) -> list[Any]:
        """The evaluation callbacks of a run with ``eval.enabled``."""
        return []

    def outcome_scores(self, cfg: RunConfig) -> tuple[tuple[str, str], ...]:
        """(metric, label) of the best evaluation a campaign's line shows for a finished run."""
        return (("best_val_acc", "val"), ("best_ood_mean", "held-out"))

    @property
    def validates(self) -> bool:
        """Whether the task has a validation set (it overrides ``val_batches``)."""
        return type(self).val_batches is not Task.val_batches

    def model_inputs(self, cfg: RunConfig) -> PositionsConfig | None:
        """What the task adds to the model's input beyond the tokens (``falcon_lab.mixers.positions``); None."""
        return None

    def __repr__(self) -> str:
        return f"<task {self.name}>"


class LengthTask(Task):
    """A task with a length axis (``falcon_lab.tasks.synthetic``): trained on ``data.lengths``, tested on the longer
    ``data.test_lengths``, evaluated per length, one table a task (``lab reproduce <task>``) and samples written
    by ``lab data <task>``. ``make(data)`` builds its generator (a ``SequenceTask``) from the run's ``data.*``.

    preset: the preset its campaign starts from (``falcon_lab/presets``); settings: ``--set`` items over it.
    """

    curriculum_range = "data.lengths"
    evaluates = True

    def __init__(self, name: str, make: Callable[[Any], SequenceTask], summary: str = "",
                 options: tuple[str, ...] = ("lengths", "test_lengths"), preset: str | None = None,
                 settings: tuple[str, ...] = (), describe: Callable[[Any], str] = lambda data: "") -> None:
        self.name, self.make, self.summary, self.options = name, make, summary, options
        self.preset, self.settings, self.describe = preset or f"{name}-tiny", settings, describe

    def generator(self, cfg: RunConfig) -> SequenceTask:
        """The task's generator with the run's options."""
        return self.make(cfg.data)

    def check(self, cfg: RunConfig) -> None:
        from falcon_lab.tasks.synthetic import check_lengths

        d = cfg.data
        try:
            task = self.generator(cfg)
        except ValueError as err:
            raise ConfigError(f"data.{err}") from None
        try:
            lo, hi = check_lengths(d.lengths, "data.lengths", task.min_length)
            test_lo, test_hi = check_lengths(d.test_lengths, "data.test_lengths", task.min_length)
            for n in (hi, test_hi):
                task.check_length(n)
        except ValueError as err:
            raise ConfigError(str(err)) from None
        if test_lo <= hi:
            raise ConfigError(f"data.test_lengths {list(d.test_lengths)} must be held out: longer than every train "
                              f"length (data.lengths {list(d.lengths)}); accepted: a range starting at {hi + 1} or "
                              f"above")
        if d.seq_len is not None and d.seq_len < hi:
            raise ConfigError(f"data.seq_len={d.seq_len} is shorter than the longest train length {hi}; accepted: "
                              f">= {hi}, or null")

    def vocab_size(self, cfg: RunConfig) -> int:
        return self.generator(cfg).vocab_size

    def seq_len(self, cfg: RunConfig) -> int:
        return cfg.data.lengths[1]

    def train_lengths(self, cfg: RunConfig, step: int) -> tuple[int, int]:
        """The length range at ``step``: data.lengths, or the curriculum's range then (its longest length
        ramped from data.start_width, as addition's widest width is)."""
        from falcon_lab.tasks.addition.curriculum import linear_widths

        d = cfg.data
        if d.curriculum == "linear":
            return linear_widths(step, d.lengths, d.start_width, d.ramp_steps)
        return d.lengths

    def train_batch(self, cfg: RunConfig, step: int, rank: int, world_size: int) -> Batch:
        from falcon_lab.train.data import seq_len
        from falcon_lab.tasks.synthetic import make_batch

        local = cfg.train.batch_size // world_size
        return make_batch(self.generator(cfg), cfg.train.seed, step, local, self.train_lengths(cfg, step),
                          seq_len(cfg), rank)

    def val_batches(self, cfg: RunConfig) -> list[Batch]:
        from falcon_lab.tasks.synthetic import eval_samples, pad_batch

        size, task, (lo, hi) = cfg.train.batch_size, self.generator(cfg), cfg.data.lengths
        samples = [s for n in range(lo, hi + 1)
                   for s in eval_samples(task, "val", n, cfg.data.val_per_length, cfg.train.seed)]
        return [pad_batch(samples[i:i + size]) for i in range(0, len(samples), size)]

    def evaluations(self, cfg: RunConfig, run: RunDir) -> list[Any]:
        from falcon_lab.eval.length_callback import LengthEvaluation

        return [LengthEvaluation.of(cfg, run)]

    def table_options(self, cfg: RunConfig) -> str:
        """The task's options as its table's caption states them (``, group S5``), or ''."""
        return self.describe(cfg.data)


_TASKS: dict[str, Task] = {}


def register_task(task: Task) -> Task:
    """Add ``task`` to the registry (ValueError for a name another task holds); returns it."""
    if not isinstance(task, Task) or not task.name:
        raise TypeError(f"register_task takes a Task with a name, got {task!r}")
    held = _TASKS.get(task.name)
    if held is not None and held is not task:
        raise ValueError(f"task {task.name!r} is registered already")
    _TASKS[task.name] = task
    return task


def unregister_task(name: str) -> None:
    """Remove the task ``name`` (a test's own task, after the test)."""
    _TASKS.pop(name, None)


def task_of(name: str) -> Task:
    """The registered task ``name``; ValueError naming the accepted ones."""
    task = _TASKS.get(name)
    if task is None:
        raise ValueError(f"unknown task {name!r}; accepted: {', '.join(_TASKS)}")
    return task


def tasks() -> tuple[Task, ...]:
    """Every registered task, in the order registered."""
    return tuple(_TASKS.values())


class TaskNames(Sequence[str]):
    """The names of the registered tasks that pass ``keep``, read at each use (a tuple's behaviour otherwise)."""

    def __init__(self, keep: Callable[[Task], bool] = lambda task: True) -> None:
        self._keep = keep

    def _names(self) -> tuple[str, ...]:
        return tuple(name for name, task in _TASKS.items() if self._keep(task))

    def __getitem__(self, i):  # type: ignore[override]
        return self._names()[i]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __add__(self, other: Sequence[str]) -> tuple[str, ...]:
        return self._names() + tuple(other)

    def __radd__(self, other: Sequence[str]) -> tuple[str, ...]:
        return tuple(other) + self._names()

    def __eq__(self, other: object) -> bool:
        return self._names() == (tuple(other) if isinstance(other, (tuple, list, TaskNames)) else other)

    def __hash__(self) -> int:
        return hash(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


TASKS = TaskNames()
# the tasks with a length axis (LengthTask): the synthetic tasks and any registered like them
SEQUENCE_TASKS = TaskNames(lambda task: isinstance(task, LengthTask))

from falcon_lab.task import builtin  # noqa: E402  (registers the lab's own tasks)

__all__ = ["SEQUENCE_TASKS", "TASKS", "LengthTask", "Task", "TaskNames", "builtin", "register_task", "task_of",
           "tasks", "unregister_task"]
