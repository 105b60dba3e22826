"""`lab ablate alignment`: the 2×2 design of the paper's appendix C.5 (Fig. 11) on the addition track, or on a
synthetic task (`task`: mqar, parity, permutation) with its tiny preset.

Timing {RAW, RBW} × write pairing {shifted, same-time}. RAW reads the state after the step's write
(the output at t reads S_t); RBW reads S_{t−1}, then writes. Shifted pairs the write feature
x_t = k_{t−1} with the target v_t (x_1 = 0); same-time pairs x_t = k_t with v_t. Falcon's default is
RAW/shifted; the baselines' own papers use RAW/same-time. Every recurrent mixer takes both as mixer
options, so every cell is one run of the addition preset per seed, made by the reproduce machinery:
run ids are config hashes, finished runs are skipped, unfinished ones resume. A cell equal to the
mixer's default sets no option at all, so it is the very run `lab reproduce addition` (or `lab reproduce
<task>`) makes. A preset's own settings for a row (`ROW_SETTINGS`) hold in every cell, but the timing and pairing the
cell sets: under `same-time` the Falcon rows' same-time cell is the table's run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from falcon_lab.ablate.alignment_table import write_sequence_tables, write_tables
from falcon_lab.ablate.cells import CELLS, OPTION_KEYS, Cell, cell_of, default_cell
from falcon_lab.config import SEQUENCE_TASKS, ConfigError, load_config
from falcon_lab.paths import results_root
from falcon_lab.reproduce.addition import check_preset
from falcon_lab.reproduce.addition_rows import DEFAULT_SEEDS, ROW_SETTINGS
from falcon_lab.reproduce.jobs import Job, Outcome
from falcon_lab.reproduce.launch import Campaign, run_campaign
from falcon_lab.mixers import MIXERS, default_options
from falcon_lab.task import LengthTask, task_of

# The mixers ablated by default: the paper's recurrent Falcon rows, then the recurrent baselines.
DEFAULT_MIXERS = ("falcon-1a.3", "falcon-3a.3", "falcon-1.3", "deltanet", "gated-deltanet", "mamba2", "retnet")
ADDITION = "addition"  # the task of the addition campaign's presets (falcon_lab.reproduce.addition)


def ablated_tasks() -> tuple[str, ...]:
    """The tasks the ablation runs on: the addition campaign's, and every registered task with a length axis."""
    return (ADDITION, *SEQUENCE_TASKS)


def check_task(task: str) -> str:
    """`task` if the ablation runs on it; ValueError naming the accepted ones."""
    if task not in ablated_tasks():
        raise ValueError(f"unknown task {task!r}; the ablation runs on: {', '.join(ablated_tasks())}")
    return task


def length_task(task: str) -> LengthTask | None:
    """The registered task `task` when it has a length axis (a synthetic task's campaign); None for addition's."""
    found = task_of(task)
    return found if isinstance(found, LengthTask) else None


def task_preset(task: str, preset: str | None) -> str:
    """The preset the ablation's runs start from: the addition campaign's (`paper` by default), or a synthetic
    task's lab preset (its campaign's, `<task>-tiny`, by default)."""
    spec = length_task(task)
    return preset or (spec.preset if spec is not None else "paper")


def ablatable_mixers() -> list[str]:
    """Registry mixers that take both a timing and an alignment option (every recurrent one)."""
    return [name for name in MIXERS if all(key in default_options(name) for key in OPTION_KEYS)]


def parse_mixers(text: str | None) -> list[str]:
    """Mixers named in a comma-separated list (DEFAULT_MIXERS for None), in order without repeats;
    ValueError naming the mixers the ablation takes."""
    if text is None:
        return list(DEFAULT_MIXERS)
    names = list(dict.fromkeys(n.strip() for n in text.split(",") if n.strip()))
    accepted = ablatable_mixers()
    takes = f"the ablation takes the recurrent mixers: {', '.join(accepted)}"
    if not names:
        raise ValueError(f"--mixers is empty; {takes}")
    for name in names:
        if name in MIXERS and name not in accepted:
            raise ValueError(f"mixer {name!r} has no timing or alignment to ablate; {takes}")
        if name not in accepted:
            raise ValueError(f"unknown mixer {name!r}; {takes}")
    return names


def cell_overrides(mixer: str, cell: Cell) -> list[str]:
    """`--set` items that turn the mixer into `cell`: only the options differing from its defaults,
    so the default cell's configuration (and run id) is the mixer's plain one."""
    default = default_cell(mixer)
    return [f"model.mixer_options.{key}={getattr(cell, key)}" for key in OPTION_KEYS
            if getattr(cell, key) != getattr(default, key)]


def row_settings(preset: str, mixer: str) -> list[str]:
    """The settings the addition preset gives this mixer's row (`ROW_SETTINGS`) but the cell's own options: the
    ablation runs each cell in the table's regime, so that the row's cell is the table's run itself."""
    cell_keys = {f"model.mixer_options.{key}" for key in OPTION_KEYS}
    return [item for item in ROW_SETTINGS.get(preset, {}).get(mixer, ()) if item.split("=", 1)[0] not in cell_keys]


def plan(preset: str, mixers: Sequence[str], seeds: int, max_steps: int | None = None,
         overrides: Sequence[str] = (), task: str = "addition") -> list[Job]:
    """One job per (seed, mixer, cell), seed by seed, so that a whole grid of one seed comes first. For a
    synthetic `task`, `preset` is a lab preset of that task (its tiny one by default).

    Raises ValueError for a bad task, preset, seed count or an override of the options the cells set, and
    ConfigError for a bad override."""
    check_task(task)
    spec = length_task(task)
    name, settings = check_preset(preset) if spec is None else (preset, spec.settings)
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    jobs = []
    for seed in range(seeds):
        for mixer in mixers:
            for cell in CELLS:
                own = row_settings(preset, mixer) if spec is None else []
                cfg = load_config(name, overrides=[*settings, *own, *overrides, *cell_overrides(mixer, cell)],
                                  task=task, mixer=mixer, train__max_steps=max_steps, train__seed=seed)
                job = Job(cfg, label=f"{mixer} {cell.name}")
                if cell_of(job) != cell:
                    raise ValueError("--set may not change model.mixer_options.timing or .alignment: "
                                     "the ablation sets them, one cell at a time")
                jobs.append(job)
    return jobs


def default_out(preset: str, results: Path, task: str = "addition") -> Path:
    """Where the tables go: `<results>/ablation` for addition's paper preset, `<results>/ablation/<preset>`
    for another, `<results>/ablation/<task>` for a synthetic task's tiny preset (`<task>/<preset>` else)."""
    spec = length_task(task)
    if spec is not None:
        base = results / "ablation" / task
        return base if preset == spec.preset else base / preset
    return results / "ablation" if preset == "paper" else results / "ablation" / preset


def ablate_alignment(preset: str | None = "paper", mixers: Sequence[str] | None = None, seeds: int | None = None,
                     gpus: int = 1, max_steps: int | None = None, overrides: Sequence[str] = (),
                     results: str | Path | None = None, out: str | Path | None = None,
                     command: str = "lab ablate alignment",
                     on_done: Callable[[Outcome], Any] | None = None, per_gpu: int = 1,
                     table_only: bool = False, gpus_per_run: int = 1, task: str = "addition",
                     only: bool = False) -> Campaign:
    """Train the cells' runs not yet finished (up to `gpus` at once, each on `gpus_per_run` GPUs), then write
    alignment.md, alignment.csv and alignment_per_width.csv (a synthetic task: alignment_per_length.csv) to
    `out`, rewriting them after every run. `only`: the tables hold `mixers` alone, not every default mixer
    beside them (a grid of its own mixers, finished when they are)."""
    check_task(task)
    preset = task_preset(task, preset)
    synthetic = length_task(task) is not None
    default_seeds = 3 if synthetic else DEFAULT_SEEDS.get(preset, 1)
    seeds = default_seeds if seeds is None else seeds
    mixers = list(DEFAULT_MIXERS) if mixers is None else list(mixers)
    results = Path(results).resolve() if results is not None else results_root()
    # The table holds every default mixer (and the ones asked for now), as `lab reproduce addition` holds every
    # row, but a default mixer that rejects an override (a --set option it has not) has no runs under it.
    jobs = plan(preset, mixers, seeds, max_steps, overrides, task)
    others = []
    for other in () if only else DEFAULT_MIXERS:
        if other in mixers:
            continue
        try:
            mine = plan(preset, [other], seeds, max_steps, overrides, task)
        except ConfigError:
            continue
        others += mine
    shown = list(dict.fromkeys([*(() if only else DEFAULT_MIXERS), *mixers]))
    everything = sorted(jobs + others, key=lambda j: (j.cfg.train.seed, shown.index(j.cfg.mixer),
                                                      CELLS.index(cell_of(j))))
    out = Path(out).resolve() if out is not None else default_out(preset, results, task)
    writer = write_sequence_tables if synthetic else write_tables
    return run_campaign(jobs, everything, writer, results, out, gpus, command, on_done,
                        per_gpu=per_gpu, table_only=table_only,
                        gpus_per_run=gpus_per_run)
