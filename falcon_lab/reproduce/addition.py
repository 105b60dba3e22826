"""`lab reproduce addition`: the paper's Table 3 (teacher-forced length extrapolation on addition).

Every row is a registry mixer trained with one preset for each seed: `paper` (the paper's stated
setting, lab preset `addition-paper`), `packed` (the same with the curriculum over widths and rows packed
with samples: the regime in which the models learn most of the task, `records/addition/packed.md`),
`packed-constant` (packed without the learning rate's decay) or `tiny` (lab preset `addition-cpu`: a few
rows that learn widths 1–6 on a CPU in minutes, tested on 7–10); a run's id is the hash of its
configuration, so rerunning the command skips finished runs and resumes unfinished ones, and the table
can be built a piece at a time (`--rows`, `--seeds`). After every run the table is rewritten from all
finished runs of the plan. A preset may train a few rows by default (`DEFAULT_ROWS`; `--rows` names any)
and give a row settings of its own (`ROW_SETTINGS`, before the `--set` overrides).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from falcon_lab.config import ConfigError, load_config
from falcon_lab.paths import results_root
from falcon_lab.reproduce.addition_rows import (
    DEFAULT_ROWS,
    DEFAULT_SEEDS,
    PRESETS,
    ROW_BY_NAME,
    ROW_NAMES,
    ROW_SETTINGS,
    ROWS,
)
from falcon_lab.reproduce.addition_table import write_tables
from falcon_lab.reproduce.jobs import Job, Outcome
from falcon_lab.reproduce.launch import Campaign, run_campaign, visible_gpus
from falcon_lab.reproduce.names import pick_preset, pick_rows
from falcon_lab.reproduce.rows import Row
from falcon_lab.runs import run_dir_for

if TYPE_CHECKING:
    from falcon_lab.reproduce.progress import CampaignProgress

def parse_rows(text: str | None, preset: str | None = None) -> list[Row]:
    """Rows named in a comma-separated list; for None, the preset's default rows (all rows without a preset,
    or for one with no defaults). ValueError naming the accepted ones."""
    if text is None and preset in DEFAULT_ROWS:
        return [ROW_BY_NAME[name] for name in DEFAULT_ROWS[preset]]
    return pick_rows(text, ROWS)


def check_preset(preset: str) -> tuple[str, tuple[str, ...]]:
    """The lab preset behind a reproduce preset and the settings over it; ValueError naming the accepted ones."""
    return pick_preset(preset, PRESETS)


def plan(preset: str, rows: Sequence[Row], seeds: int, max_steps: int | None = None,
         overrides: Sequence[str] = ()) -> list[Job]:
    """One job per (seed, row), seed by seed, so that a whole table of one seed comes first.

    Raises ValueError for a bad preset or seed count and ConfigError for a bad override."""
    name, settings = check_preset(preset)
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    own = ROW_SETTINGS.get(preset, {})
    return [Job(load_config(name, overrides=[*settings, *own.get(row.name, ()), *overrides], task="addition",
                            mixer=row.name, train__max_steps=max_steps, train__seed=seed), label=row.name)
            for seed in range(seeds) for row in rows]


def default_out(preset: str, results: Path) -> Path:
    """Where the tables go: `<results>/addition` for the paper preset, `<results>/addition/<preset>` else."""
    return results / "addition" if preset == "paper" else results / "addition" / preset


def reproduce_addition(preset: str = "paper", rows: Sequence[Row] | None = None, seeds: int | None = None,
                       gpus: int = 1, max_steps: int | None = None, overrides: Sequence[str] = (),
                       results: str | Path | None = None, out: str | Path | None = None,
                       command: str = "lab reproduce addition",
                       on_done: Callable[[Outcome], None] | None = None, per_gpu: int = 1,
                       table_only: bool = False, gpus_per_run: int = 1,
                       progress: CampaignProgress | None = None) -> Campaign:
    """Train the rows' runs not yet finished (up to `gpus` at once, each on `gpus_per_run` GPUs), then write
    table.md, table.csv and per_width.csv to `out`, rewriting them after every run, and draw per_width.png
    (and progress.png) from them at the end; `command` is printed in table.md. `progress` hears of each run
    as it starts."""
    seeds = DEFAULT_SEEDS.get(preset, 1) if seeds is None else seeds
    rows = parse_rows(None, preset) if rows is None else list(rows)
    results = Path(results).resolve() if results is not None else results_root()
    # The table holds every row of the preset's plan (its default rows), not only the rows run now, so that
    # it can be built a piece at a time, and the other rows begun before. With --set overrides the plan is
    # the rows run now and the rows begun before with the same overrides; a row whose mixer rejects one (a
    # conv_size the transformer has not) has no runs.
    jobs = plan(preset, rows, seeds, max_steps, overrides)
    wanted = {r.name for r in rows}
    planned = set() if overrides else {r.name for r in parse_rows(None, preset)}
    others = []
    for row in ROWS:
        if row.name not in wanted:
            try:
                mine = plan(preset, [row], seeds, max_steps, overrides)
            except ConfigError:
                continue
            others += [j for j in mine
                       if row.name in planned or run_dir_for(j.run_id, results=results).root.exists()]
    everything = sorted(jobs + others, key=lambda j: (j.cfg.train.seed, ROW_NAMES.index(j.label)))
    out = Path(out).resolve() if out is not None else default_out(preset, results)

    campaign = run_campaign(jobs, everything, write_tables, results, out, gpus, command, on_done,
                            per_gpu=per_gpu, table_only=table_only, gpus_per_run=gpus_per_run, progress=progress)
    if campaign.finished:
        from falcon_lab.plots.addition import plot_addition

        campaign.figures = plot_addition(out, command=f"lab plot addition --table {out}")
    return campaign


def cpu_processes(preset: str) -> int | None:
    """How many runs a preset makes at once on a machine without GPUs when --gpus is not given: one process
    per core for `tiny` (each on one thread, as small models use cores best); None: the campaign's default."""
    if preset != "tiny" or visible_gpus():
        return None
    return max(1, os.cpu_count() or 1)
