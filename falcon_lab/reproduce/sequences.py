"""`lab reproduce mqar|parity|permutation`: the synthetic tasks over the mixers, one table a task.

Every row is a registry mixer trained with the task's tiny preset (`falcon_lab/presets/<task>-tiny.yaml`) for each
seed; as with addition, a run's id is the hash of its configuration, so rerunning the command skips
finished runs and resumes unfinished ones, and the table is rewritten after every run. Each run is read at
its best step (the highest accuracy on the train lengths): whole-sequence and per-token accuracy on the
train lengths and on the held-out ones, and its reach, the longest length up to which every length is
right in at least 95% of samples.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from falcon_lab.config import SEQUENCE_TASKS, load_config
from falcon_lab.task import LengthTask, task_of
from falcon_lab.eval.callback import evals_path, pick_best, read_evals
from falcon_lab.paths import results_root
from falcon_lab.reproduce.addition_table import (
    finished_runs,
    format_cell,
    format_params,
    markdown_table,
    mean_std,
    provenance_sentence,
)
from falcon_lab.reproduce.jobs import Job, Outcome
from falcon_lab.reproduce.launch import Campaign, run_campaign
from falcon_lab.runs import atomic_write_text, run_dir_for

# The baselines, then the Falcon rules the addition table reports; each with the registry's defaults.
ROWS = ("transformer", "retnet", "mamba2", "deltanet", "gated-deltanet", "falcon-1a.3", "falcon-3a.3", "falcon-1.3",
        "falcon-2")
REACHED = 95.0
# (metric of a run at its best step, column, header)
METRICS = (("val_acc", "val_acc", "val. acc."), ("val_token_acc", "val_token_acc", "val. per token"),
           ("ood_mean", "ood_mean", "held-out acc."), ("ood_token_mean", "ood_token_mean", "held-out per token"),
           ("reach", "reach", "reach"))


def check_task(task: str) -> LengthTask:
    """The registered task `task` if it has a length axis (``falcon_lab.task.LengthTask``); ValueError naming the
    accepted ones."""
    found = task_of(task) if task in SEQUENCE_TASKS else None
    if not isinstance(found, LengthTask):
        raise ValueError(f"unknown task {task!r}; accepted: {', '.join(SEQUENCE_TASKS)}")
    return found


def parse_rows(text: str | None) -> list[str]:
    """Mixers named in a comma-separated list (all rows for None): the table's rows, or any other mixer of the
    registry (a rule registered since, say); ValueError naming the accepted ones."""
    from falcon_lab.mixers import MIXERS

    if text is None:
        return list(ROWS)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError(f"--rows is empty; accepted: {', '.join(ROWS)}")
    for name in names:
        if name not in ROWS and name not in MIXERS:
            raise ValueError(f"unknown row {name!r}; accepted: {', '.join(ROWS)}, or any mixer of `lab train "
                             f"--mixer`")
    return list(dict.fromkeys(names))


def plan(task: str, rows: Sequence[str], seeds: int, max_steps: int | None = None,
         overrides: Sequence[str] = ()) -> list[Job]:
    """One job per (seed, row), seed by seed. ValueError for a bad task or seed count, ConfigError for a bad
    override."""
    spec = check_task(task)
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    return [Job(load_config(spec.preset, overrides=[*spec.settings, *overrides], task=task, mixer=row,
                            train__max_steps=max_steps, train__seed=seed), label=row)
            for seed in range(seeds) for row in rows]


def reach(teacher_forced: dict[int, float], first: int, at_least: float = REACHED) -> int:
    """The longest length L with every length first..L right in >= `at_least` % of samples; first − 1 if none."""
    n = first
    while teacher_forced.get(n, 0.0) >= at_least:
        n += 1
    return n - 1


def best_of(run: dict[str, Any], results: Path) -> dict[str, Any] | None:
    """A finished run's best evaluation (its evals.csv row of highest val. acc.) with its reach; None without."""
    best = pick_best(read_evals(evals_path(run_dir_for(run["job"].run_id, results=results))))
    if best is None:
        return None
    return {**best, "reach": reach(best.get("teacher_forced", {}), run["job"].cfg.data.lengths[0])}


def write_tables(jobs: Sequence[Job], results: Path, out: Path, command: str) -> int:
    """table.md, table.csv (mean and std over seeds per row), per_length.csv (every length of every run at
    its best step) and its figure per_length.png in `out`, from the finished runs of `jobs`; returns how
    many are finished."""
    runs = finished_runs(jobs, results)
    bests = {r["job"].run_id: best_of(r, results) for r in runs}
    table, lines = [], []
    for row in dict.fromkeys(j.cfg.mixer for j in jobs):
        mine = [r for r in runs if r["job"].cfg.mixer == row and bests[r["job"].run_id] is not None]
        record: dict[str, Any] = {"row": row, "runs": len(mine), "planned": sum(j.cfg.mixer == row for j in jobs),
                                  "params": mine[0]["registry"]["n_params"] if mine else None,
                                  "seeds": " ".join(str(r["seed"]) for r in mine)}
        for metric, column, _ in METRICS:
            values = [float(bests[r["job"].run_id][metric]) for r in mine
                      if bests[r["job"].run_id].get(metric) is not None]
            record[f"{column}_mean"], record[f"{column}_std"] = mean_std(values)
        table.append(record)
        lines.append([row, format_params(record["params"]), f"{record['runs']}/{record['planned']}",
                      *(format_cell(record[f"{c}_mean"], record[f"{c}_std"], 1) for _, c, _ in METRICS)])
    cfg = jobs[0].cfg
    d = cfg.data
    options = task_of(cfg.task).table_options(cfg)
    text = (f"# {cfg.task}: accuracy at the best step (train lengths {d.lengths[0]}–{d.lengths[1]}, held out "
            f"{d.test_lengths[0]}–{d.test_lengths[1]})\n\n{provenance_sentence(jobs, runs, command)}\n\n"
            f"Preset `{cfg.preset}`: d_model {cfg.model.d_model}, {cfg.model.n_layers} layers, {cfg.model.n_heads} "
            f"heads; {cfg.train.max_steps} steps of batch {cfg.train.batch_size}, lr {cfg.optim.lr:g}{options}; "
            f"evaluated every {cfg.train.val_every} steps with {cfg.eval.n_per_length} samples per length. "
            f"Whole-sequence and per-token accuracy (%), mean ± std over seeds; reach: the longest length up to "
            f"which every length is right in ≥ {REACHED:g}% of samples.\n\n"
            + markdown_table(["row", "params", "runs", *(h for _, _, h in METRICS)], lines))
    atomic_write_text(out / "table.md", text)
    atomic_write_text(out / "table.csv", pd.DataFrame(table).to_csv(index=False))
    per_length = [{"row": r["job"].cfg.mixer, "seed": r["seed"], "run_id": r["job"].run_id, "step": best["step"],
                   "length": n, "teacher_forced": acc, "per_token": best.get("per_token", {}).get(n)}
                  for r in runs if (best := bests[r["job"].run_id]) is not None
                  for n, acc in sorted(best.get("teacher_forced", {}).items())]
    columns = ["row", "seed", "run_id", "step", "length", "teacher_forced", "per_token"]
    atomic_write_text(out / "per_length.csv", pd.DataFrame(per_length, columns=columns).to_csv(index=False))
    if per_length:
        from falcon_lab.plots.lengths import plot_lengths

        plot_lengths(out / "per_length.csv", out / "per_length.png", cfg.task, d.lengths, d.test_lengths, command)
    return len(runs)


def reproduce_task(task: str, rows: Sequence[str] | None = None, seeds: int = 2, gpus: int = 1,
                   max_steps: int | None = None, overrides: Sequence[str] = (),
                   results: str | Path | None = None, out: str | Path | None = None, command: str = "",
                   on_done: Callable[[Outcome], None] | None = None, table_only: bool = False, per_gpu: int = 1,
                   gpus_per_run: int = 1) -> Campaign:
    """Train the rows' runs not yet finished (up to `gpus` at once, each on `gpus_per_run` GPUs), then write the
    tables to `out` (default `<results>/<task>`), rewriting them after every run."""
    rows = list(ROWS) if rows is None else list(rows)
    results = Path(results).resolve() if results is not None else results_root()
    jobs = plan(task, rows, seeds, max_steps, overrides)
    out = Path(out).resolve() if out is not None else results / task
    return run_campaign(jobs, jobs, write_tables, results, out, gpus, command or f"lab reproduce {task}", on_done,
                        table_only=table_only, per_gpu=per_gpu, gpus_per_run=gpus_per_run)
