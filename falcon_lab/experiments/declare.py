"""What an experiment file declares: the question, what it trains, what it computes from the runs, its budget.

An experiment trains one or more parts, each a campaign of the lab's machinery with its preset, rows or mixers,
seeds and overrides: a table of `lab reproduce addition` or `lab reproduce <task>`, a grid of `lab ablate
alignment`, a grid of single `lab train` runs, or `lab` commands whose output is their own files (benchmarks,
sweeps). It computes each part's tables and figures from whatever runs exist. Its name is the path of its record
under `records/` with `/` as `-` (`addition/same-time` -> `addition-same-time`). `smoke()` is the same experiment
at a tiny size: one seed, a few steps of a one-layer model of width 16 on the CPU, so that every declared
experiment is exercised by the tests.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from falcon_lab.reproduce.jobs import Job, Outcome

if TYPE_CHECKING:
    from falcon_lab.reproduce.launch import Campaign

# The tiny size every smoke run shares: a one-layer model of width 16, batches of 4, three steps, one evaluation.
SMOKE_STEPS = 3
SMOKE_ROWS = 2
SMOKE_MODEL = ("model.d_model=16", "model.n_layers=1", "model.n_heads=2", "train.batch_size=4",
               f"train.val_every={SMOKE_STEPS}", "optim.warmup_steps=1", "eval.n_per_length=2")
# Addition at widths 1-4 trained and 5-6 held out (rows of 64 positions where a preset packs them); the synthetic
# tasks at two train lengths and two held-out ones.
SHORT = ("data.val_per_length=1",)
SMOKE_TASK = {
    "addition": (*SMOKE_MODEL, *SHORT, "data.widths=[1,4]", "data.seq_len=64", "data.ramp_steps=2",
                 "eval.widths=[1,6]", "eval.held_out_from=5", "eval.free_per_length=0"),
    "mqar": (*SMOKE_MODEL, *SHORT, "data.lengths=[16,17]", "data.test_lengths=[33,34]"),
    "parity": (*SMOKE_MODEL, *SHORT, "data.lengths=[3,4]", "data.test_lengths=[5,6]"),
    "permutation": (*SMOKE_MODEL, *SHORT, "data.lengths=[3,4]", "data.test_lengths=[5,6]"),
}



def smoke_sets(task: str = "addition") -> tuple[str, ...]:
    """The task's smoke size as `--set` options, for the smoke commands of a Commands part."""
    return tuple(word for item in SMOKE_TASK[task] for word in ("--set", item))


def bench_step(mixers: str, folder: str, *more: str, samples: str | None = None, preset: str = "same-time",
               steps: int = 10) -> tuple[str, ...]:
    """A Commands command: `lab bench step` of `mixers` at `preset`'s size, compiled, `steps` timed steps, samples
    `samples` (None: the preset's), then `more` options, written to `{out}/folder`."""
    return ("bench", "step", "--preset", preset, "--steps", str(steps), "--mixers", mixers,
            *(("--samples", samples) if samples else ()), "--set", "train.compile=true", *more,
            "--out", "{out}/" + folder)


def _flags(pairs: Sequence[tuple[str, object | None]], overrides: Sequence[str],
           max_steps: int | None) -> list[str]:
    words: list[str] = []
    for flag, value in pairs:
        if value is not None:
            words += [flag, str(value)]
    if max_steps is not None:
        words += ["--max-steps", str(max_steps)]
    for item in overrides:
        words += ["--set", item]
    return words


# Each kind of part below declares the same few things: `task`, `seeds`, `overrides`, `max_steps`, `folder` (the
# subfolder of the experiment's output its tables go to, "" for the output itself) and `table` (its main table's
# file), and does the same few things: `words()` (the `lab` command that trains the same runs), `plan()` (every
# planned run), `first(n)` (the part training only its first rows) and `campaign(...)` (train what is missing, or
# with `table_only` nothing, and write the tables).


@dataclass(frozen=True)
class AdditionTable:
    """`lab reproduce addition`: rows of the addition table under one campaign preset, each over `seeds` seeds.
    Computes table.md, table.csv, per_width.csv and the figures per_width.png, progress.png, heatmap.png."""

    preset: str
    rows: tuple[str, ...] | None = None  # None: the preset's default rows
    seeds: int = 3
    overrides: tuple[str, ...] = ()
    max_steps: int | None = None
    folder: str = ""
    task: str = field(default="addition", init=False)
    table: str = field(default="table.md", init=False)

    def words(self) -> list[str]:
        """The `lab` command line that trains the same runs and writes the same tables."""
        rows = ",".join(self.rows) if self.rows else None
        return ["lab", "reproduce", "addition", *_flags([("--preset", self.preset), ("--rows", rows),
                                                         ("--seeds", self.seeds)], self.overrides, self.max_steps)]

    def _rows(self) -> list[Any]:
        from falcon_lab.reproduce.addition import parse_rows

        return parse_rows(",".join(self.rows) if self.rows else None, self.preset)

    def first(self, n: int) -> AdditionTable:
        """The same table training only its first `n` rows."""
        return replace(self, rows=tuple(r.name for r in self._rows()[:n]))

    def plan(self) -> list[Job]:
        from falcon_lab.reproduce.addition import plan

        return plan(self.preset, self._rows(), self.seeds, self.max_steps, self.overrides)

    def campaign(self, results: Path, out: Path, slots: int, per_gpu: int, gpus_per_run: int, table_only: bool,
                 command: str, on_done: Callable[[Outcome], None] | None) -> Campaign:
        from falcon_lab.reproduce.addition import reproduce_addition

        return reproduce_addition(self.preset, self._rows(), self.seeds, slots, self.max_steps, self.overrides,
                                  results, out, command, on_done=on_done, per_gpu=per_gpu, table_only=table_only,
                                  gpus_per_run=gpus_per_run)


@dataclass(frozen=True)
class TaskTable:
    """`lab reproduce <task>`: the mixers on a synthetic task (mqar, parity, permutation) with its tiny preset.
    Computes table.md, table.csv, per_length.csv and per_length.png."""

    task: str
    rows: tuple[str, ...] | None = None  # None: every row of the task table
    seeds: int = 2
    overrides: tuple[str, ...] = ()
    max_steps: int | None = None
    folder: str = ""
    table: str = field(default="table.md", init=False)

    def words(self) -> list[str]:
        rows = ",".join(self.rows) if self.rows else None
        return ["lab", "reproduce", self.task, *_flags([("--rows", rows), ("--seeds", self.seeds)], self.overrides,
                                                       self.max_steps)]

    def plan(self) -> list[Job]:
        from falcon_lab.reproduce.sequences import ROWS, plan

        return plan(self.task, self.rows or ROWS, self.seeds, self.max_steps, self.overrides)

    def first(self, n: int) -> TaskTable:
        """The same table training only its first `n` rows."""
        from falcon_lab.reproduce.sequences import ROWS

        return replace(self, rows=tuple((self.rows or ROWS)[:n]))

    def campaign(self, results: Path, out: Path, slots: int, per_gpu: int, gpus_per_run: int, table_only: bool,
                 command: str, on_done: Callable[[Outcome], None] | None) -> Campaign:
        from falcon_lab.reproduce.sequences import reproduce_task

        return reproduce_task(self.task, self.rows, self.seeds, slots, self.max_steps, self.overrides, results, out,
                              command, on_done=on_done, table_only=table_only, per_gpu=per_gpu,
                              gpus_per_run=gpus_per_run)


@dataclass(frozen=True)
class AlignmentGrid:
    """`lab ablate alignment`: each mixer in the four cells timing {RAW, RBW} x pairing {shifted, same-time},
    on addition under a campaign preset or on a synthetic task with its tiny preset. Computes alignment.md,
    alignment.csv, the per-width (or per-length) CSV and the heat maps alignment.png; with `only` (`--only`) the
    tables hold its own mixers alone, else every default mixer too."""

    task: str = "addition"
    preset: str | None = None  # addition: a campaign preset (default paper); a synthetic task: None
    mixers: tuple[str, ...] | None = None  # None: the ablation's default mixers
    seeds: int = 3
    overrides: tuple[str, ...] = ()
    max_steps: int | None = None
    folder: str = ""
    only: bool = False  # the tables hold `mixers` alone, not every default mixer beside them (`--only`)
    table: str = field(default="alignment.md", init=False)

    def words(self) -> list[str]:
        mixers = ",".join(self.mixers) if self.mixers else None
        task = self.task if self.task != "addition" else None
        only = ["--only"] if self.only else []
        return ["lab", "ablate", "alignment", *only, *_flags([("--task", task), ("--preset", self.preset),
                                                              ("--mixers", mixers), ("--seeds", self.seeds)],
                                                             self.overrides, self.max_steps)]

    def plan(self) -> list[Job]:
        from falcon_lab.ablate.alignment import DEFAULT_MIXERS, plan, task_preset

        return plan(task_preset(self.task, self.preset), self.mixers or DEFAULT_MIXERS, self.seeds, self.max_steps,
                    self.overrides, self.task)

    def first(self, n: int) -> AlignmentGrid:
        """The same grid training only its first mixer's four cells (`n` is for the other kinds' rows)."""
        from falcon_lab.ablate.alignment import DEFAULT_MIXERS

        return replace(self, mixers=tuple((self.mixers or DEFAULT_MIXERS)[:1]))

    def campaign(self, results: Path, out: Path, slots: int, per_gpu: int, gpus_per_run: int, table_only: bool,
                 command: str, on_done: Callable[[Outcome], None] | None) -> Campaign:
        from falcon_lab.ablate.alignment import ablate_alignment

        campaign = ablate_alignment(self.preset, self.mixers, self.seeds, slots, self.max_steps, self.overrides,
                                    results, out, command, on_done=on_done, per_gpu=per_gpu, table_only=table_only,
                                    gpus_per_run=gpus_per_run, task=self.task, only=self.only)
        if campaign.finished:
            from falcon_lab.plots.ablation import plot_ablation

            campaign.figures = plot_ablation(out, command=f"lab plot ablation --table {out}")
        return campaign


@dataclass(frozen=True)
class Row:
    """One row of a RunGrid: a label, a mixer and the settings of its runs over the grid's."""

    label: str
    mixer: str
    settings: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunGrid:
    """`lab train` runs one at a time: each row a mixer with its own settings over a lab preset, over `seeds`
    seeds (the runs `lab train --preset P --mixer M --seed S --set ...` makes). Computes runs.md and runs.csv:
    each row's best evaluation, mean ± std over seeds (falcon_lab.reproduce.runs_table)."""

    task: str
    preset: str
    rows: tuple[Row, ...]
    seeds: int = 3
    overrides: tuple[str, ...] = ()
    max_steps: int | None = None
    folder: str = ""
    table: str = field(default="runs.md", init=False)

    def words(self) -> list[str]:
        return ["lab", "train", "--task", self.task, "--preset", self.preset, "--mixer", "<row's mixer>", "--seed",
                f"<0..{self.seeds - 1}>", *_flags([], self.overrides, self.max_steps), "<row's --set>"]

    def plan(self) -> list[Job]:
        from falcon_lab.config import load_config

        if self.seeds < 1:
            raise ValueError(f"seeds must be >= 1, got {self.seeds}")
        return [Job(load_config(self.preset, overrides=[*self.overrides, *row.settings], task=self.task,
                                mixer=row.mixer, train__max_steps=self.max_steps, train__seed=seed), label=row.label)
                for seed in range(self.seeds) for row in self.rows]

    def first(self, n: int) -> RunGrid:
        """The same grid training only its first `n` rows."""
        return replace(self, rows=self.rows[:n])

    def campaign(self, results: Path, out: Path, slots: int, per_gpu: int, gpus_per_run: int, table_only: bool,
                 command: str, on_done: Callable[[Outcome], None] | None) -> Campaign:
        from falcon_lab.reproduce.launch import run_campaign
        from falcon_lab.reproduce.runs_table import write_runs_table

        jobs = self.plan()
        return run_campaign(jobs, jobs, write_runs_table, results, out, slots, command, on_done, per_gpu=per_gpu,
                            table_only=table_only, gpus_per_run=gpus_per_run)


class CommandFailed(RuntimeError):
    """A command of a Commands part ended with a non-zero exit code."""


def check_words(words: Sequence[str]) -> None:
    """ValueError unless `lab <words>` names a command of the lab and only options that command takes (its
    placeholders `{out}`, `{results}` aside): what a declared command line must hold to run at all."""
    import typer.main

    from falcon_lab.cli import app

    command: Any = typer.main.get_command(app)
    rest = list(words)
    while getattr(command, "commands", None) and rest and not rest[0].startswith("-"):
        if rest[0] not in command.commands:
            raise ValueError(f"`lab {' '.join(words)}`: no command {rest[0]!r}; accepted: "
                             f"{', '.join(sorted(command.commands))}")
        command = command.commands[rest.pop(0)]
    accepted = {opt for param in command.params for opt in (*param.opts, *param.secondary_opts)}
    for word in rest:
        flag = word.split("=", 1)[0]
        if flag.startswith("--") and flag not in accepted:
            raise ValueError(f"`lab {' '.join(words)}`: no option {flag}; accepted: {', '.join(sorted(accepted))}")


@dataclass(frozen=True)
class Commands:
    """`lab` commands whose output is files of their own rather than runs in the registry (benchmarks, sweeps),
    run one after another in this process as `lab` runs them. In their words `{out}` is the part's output folder
    and `{results}` the results folder. `smoke_commands`: the smoke run's commands (tiny sizes, the CPU); a part
    whose commands need a GPU (or a size no CPU trains in seconds) has none, and its smoke run checks the commands
    against the command line (`check_words`) and writes `checked.md` saying so. `report`: the commands that remake
    the tables from what the commands left (none: their files are the report)."""

    commands: tuple[tuple[str, ...], ...]
    table: str
    smoke_commands: tuple[tuple[str, ...], ...] | None = None  # None: needs a GPU
    report: tuple[tuple[str, ...], ...] = ()
    folder: str = ""
    task: str = field(default="commands", init=False)
    seeds: int = field(default=1, init=False)
    overrides: tuple[str, ...] = field(default=(), init=False)
    max_steps: int | None = field(default=None, init=False)
    checking: bool = False  # set by first() for a part that needs a GPU: check the commands, run none

    def words(self) -> list[str]:
        return [w for i, c in enumerate(self.commands) for w in (*(("&&",) if i else ()), "lab", *c)]

    def plan(self) -> list[Job]:
        for words in (*self.commands, *(self.smoke_commands or ()), *self.report):
            check_words(words)
        return []

    def first(self, n: int) -> Commands:
        """The smoke commands in place of the commands (for a part that needs a GPU: a check of its commands)."""
        if self.smoke_commands is None:
            return replace(self, table="checked.md", report=(), checking=True)
        return replace(self, commands=self.smoke_commands)

    def campaign(self, results: Path, out: Path, slots: int, per_gpu: int, gpus_per_run: int, table_only: bool,
                 command: str, on_done: Callable[[Outcome], None] | None) -> Campaign:
        import shlex

        from falcon_lab.cli import app
        from falcon_lab.reproduce.launch import Campaign
        from falcon_lab.runs import atomic_write_text

        self.plan()
        out.mkdir(parents=True, exist_ok=True)
        if self.checking:
            lines = "\n".join(f"    lab {shlex.join(c)}" for c in self.commands)
            atomic_write_text(out / self.table, f"# Checked, not run\n\nThese commands need a GPU (or a size only a "
                                                f"GPU trains soon); `{command}` checked each against the command line "
                                                f"and ran none:\n\n{lines}\n")
            return Campaign([], out, 0, 0, [], results)
        for words in self.report if table_only else self.commands:
            args = [w.format(out=out, results=results) for w in words]
            try:  # in this process, as `lab` itself would run it: it ends in SystemExit with its exit code
                app(args, prog_name="lab")
            except SystemExit as done:
                code = done.code if isinstance(done.code, int) else 1 if done.code else 0
            else:
                code = 0
            if code:
                raise CommandFailed(f"`lab {shlex.join(args)}` ended with exit code {code}")
        return Campaign([], out, 0, 0, [], results)


Part = AdditionTable | TaskTable | AlignmentGrid | RunGrid | Commands


@dataclass(frozen=True)
class Experiment:
    """One question the lab answers: the runs that answer it and what is computed from them.

    `record`: the folder under `records/` its output is kept in (the experiment's name is that path with `/` as
    `-`); `trains`: one campaign, or several each writing to a subfolder of its own (`folder`); `budget_s`: the
    device time the whole experiment is given on `machine` (what `lab experiment list` shows; a call's own limit is
    `lab experiment run --budget`); `gpu_settings`: placement settings its runs take on a GPU (`train.compile`,
    `train.cuda_graphs`: they change no run id); `not_remade`: what its record holds that no command here remakes
    (a script's analysis), said by `lab experiment status`."""

    record: str
    question: str
    trains: Part | tuple[Part, ...]
    budget_s: float
    machine: str
    gpu_settings: tuple[str, ...] = ()
    not_remade: str = ""

    @property
    def name(self) -> str:
        return self.record.strip("/").replace("/", "-")

    @property
    def parts(self) -> tuple[Part, ...]:
        return self.trains if isinstance(self.trains, tuple) else (self.trains,)

    def plan(self) -> list[Job]:
        """Every run of every part, each once (parts may share runs: a grid's default cell is a table's run)."""
        jobs: dict[str, Job] = {}
        for part in self.parts:
            for job in part.plan():
                jobs.setdefault(job.run_id, job)
        return list(jobs.values())

    def on_gpu(self) -> Experiment:
        """The experiment with its GPU placement settings over every part's (the same runs)."""
        if not self.gpu_settings:
            return self
        return replace(self, trains=tuple(p if isinstance(p, Commands) else
                                          replace(p, overrides=(*p.overrides, *self.gpu_settings))
                                          for p in self.parts))

    def smoke(self) -> Experiment:
        """The same experiment at the shared tiny size on the CPU: one seed, SMOKE_STEPS steps, the first SMOKE_ROWS
        rows of each part (an alignment grid: its first mixer's four cells)."""
        def tiny(part: Part) -> Part:
            if isinstance(part, Commands):
                return part.first(SMOKE_ROWS)
            settings = (*part.overrides, *SMOKE_TASK[part.task])
            return replace(part.first(SMOKE_ROWS), seeds=1, max_steps=SMOKE_STEPS, overrides=settings)

        return replace(self, trains=tuple(tiny(p) for p in self.parts), budget_s=60.0, machine="a CPU")
