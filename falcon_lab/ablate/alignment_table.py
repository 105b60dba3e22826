"""The alignment ablation's tables from finished runs: alignment.md, alignment.csv, alignment_per_width.csv
(on a synthetic task: alignment_per_length.csv).

One row per mixer and cell: the addition table's numbers (each run at its best step, mean ± sample
standard deviation over seeds) and, for each, the cell's mean minus the mean of the mixer's default
cell (the cell of its own paper).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from falcon_lab.ablate.cells import CELLS, cell_of, default_cell
from falcon_lab.reproduce.addition_rows import ROW_BY_NAME
from falcon_lab.reproduce.addition_table import (
    finished_runs,
    format_cell,
    format_params,
    markdown_table,
    mean_std,
    metrics,
    per_width_rows as addition_rows,
    provenance_sentence,
    settings_sentence,
    span,
    split_of,
)
from falcon_lab.reproduce.jobs import Job
from falcon_lab.reproduce.sequences import REACHED, best_of
from falcon_lab.runs import atomic_write_text

FILES = ("alignment.md", "alignment.csv", "alignment_per_width.csv")


def main_columns(val: range = range(1, 33), held_out: range = range(33, 49)) -> tuple[tuple[str, str, int], ...]:
    """alignment.md's first table, for runs validated on `val` and holding out `held_out`: (column of
    alignment.csv, header, decimals)."""
    first, last = held_out.start, held_out.stop - 1
    return (("best_step", "Best step", 0), ("val_acc", f"Val. acc. {span(val)}", 1),
            ("ood_mean", f"Mean {span(held_out)}", 1), (f"acc{first}", f"Acc@{first}", 1),
            (f"acc{last}", f"Acc@{last}", 1))


def token_columns(val: range = range(1, 33), held_out: range = range(33, 49)) -> tuple[tuple[str, str, int], ...]:
    """alignment.md's per-token table: (column of alignment.csv, header, decimals)."""
    return (("token_val_acc", f"Per-token val. acc. {span(val)}", 1),
            ("token_ood_mean", f"Per-token mean {span(held_out)}", 1))


MAIN = main_columns()
TOKENS = token_columns()
PER_WIDTH_COLUMNS = ["row", "timing", "alignment", "cell", "seed", "run_id", "which", "step", "width", "trained",
                     "held_out", "teacher_forced", "per_token", "free_running"]


def label_of(mixer: str) -> str:
    """The mixer as the addition table names it (its registry name when it is no row there)."""
    row = ROW_BY_NAME.get(mixer)
    return row.label if row is not None else mixer


def cell_rows(jobs: Sequence[Job], runs: list[dict[str, Any]], measures: Sequence[tuple[str, str]],
              value: Callable[[dict[str, Any], str], Any], extra: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """One row per mixer and cell of the plan (mixers in plan order, cells in CELLS order): for each measure
    `(key, column)`, the mean and std over the cell's runs of `value(run, key)` (None values left out), and its
    difference from the mixer's default cell (`<column>_delta`); `extra` is copied into every row."""
    planned: dict[tuple[str, Any], int] = {}
    for job in jobs:
        key = (job.cfg.mixer, cell_of(job))
        planned[key] = planned.get(key, 0) + 1
    table = []
    for mixer in dict.fromkeys(mixer for mixer, _ in planned):
        default = default_cell(mixer)
        records = {}
        for cell in CELLS:
            if (mixer, cell) not in planned:
                continue
            mine = [r for r in runs if r["job"].cfg.mixer == mixer and cell_of(r["job"]) == cell]
            record: dict[str, Any] = {
                "row": mixer, "model": label_of(mixer), "timing": cell.timing, "alignment": cell.alignment,
                "cell": cell.name, "default": cell == default, "runs": len(mine), "planned": planned[(mixer, cell)],
                "params": mine[0]["registry"]["n_params"] if mine else None,
                "seeds": " ".join(str(r["seed"]) for r in mine), **(extra or {})}
            for key, column in measures:
                values = [float(v) for r in mine if (v := value(r, key)) is not None]
                record[f"{column}_mean"], record[f"{column}_std"] = mean_std(values)
            records[cell] = record
        base = records.get(default)
        for record in records.values():
            for _, column in measures:
                mean = record[f"{column}_mean"]
                ref = base[f"{column}_mean"] if base is not None else None
                record[f"{column}_delta"] = None if mean is None or ref is None else mean - ref
        table.extend(records.values())
    return table


def summary_rows(jobs: Sequence[Job], runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """alignment.csv's rows on addition: the addition table's numbers per mixer and cell (`cell_rows`)."""
    measures = [(metric, column) for metric, column, _, _ in metrics(*split_of(jobs))]
    return cell_rows(jobs, runs, measures, lambda run, metric: run["metrics"].get(metric))


def per_width_rows(runs: list[dict[str, Any]], results: Path) -> list[dict[str, Any]]:
    """alignment_per_width.csv's rows: the addition table's per-width rows, each with its cell."""
    # A run's cell is known from its configuration; the addition rows know only its mixer.
    cells = {r["job"].run_id: cell_of(r["job"]) for r in runs}
    rows = addition_rows(runs, results)
    for row in rows:
        cell = cells[row["run_id"]]
        row.update(timing=cell.timing, alignment=cell.alignment, cell=cell.name)
    return rows


def _delta(value: float | None, decimals: int) -> str:
    # Adding 0.0 turns a rounded -0.0 into 0.0, so no difference prints as "+0.0".
    return "—" if value is None else f"{round(value, decimals) + 0.0:+.{decimals}f}"


def _body(table: list[dict[str, Any]], columns: Sequence[tuple[str, str, int]]) -> list[list[str]]:
    body = []
    for r in table:
        cell = next(c for c in CELLS if c.name == r["cell"])
        cells = [r["model"], cell.label + (" (default)" if r["default"] else ""), f"{r['runs']}/{r['planned']}"]
        for column, _, decimals in columns:
            cells += [format_cell(r[f"{column}_mean"], r[f"{column}_std"], decimals),
                      _delta(r[f"{column}_delta"], decimals)]
        body.append(cells)
    return body


def _header(columns: Sequence[tuple[str, str, int]]) -> list[str]:
    header = ["Mixer", "Cell", "Runs"]
    for _, title, _ in columns:
        header += [title, "Δ"]
    return header


def render_markdown(jobs: Sequence[Job], table: list[dict[str, Any]], runs: list[dict[str, Any]],
                    command: str, out: Path) -> str:
    """alignment.md: provenance, settings, the design, then one table of whole-answer and one of
    per-token accuracy, mixers without finished runs left out (and named)."""
    shown = [r for r in table if any(o["runs"] for o in table if o["row"] == r["row"])]
    cfg = jobs[0].cfg
    lines = [
        "# Ablation: timing × write pairing on addition (the paper's appendix C.5, Fig. 11)",
        "",
        provenance_sentence(jobs, runs, command),
        "",
        settings_sentence(jobs),
        "",
        ("Cells: timing RAW (write, then read: the output at t reads S_t) or RBW (read S_{t−1}, then write); "
         "write pairing shifted (write feature x_t = k_{t−1} paired with the target v_t, x_1 = 0) or same-time "
         "(x_t = k_t). (default): the mixer's own paper's cell, RAW · shifted for Falcon and RAW · same-time "
         "for the baselines; that run is the one `lab reproduce addition` makes. Accuracies in percent, "
         "teacher-forced, each run at its best step (highest val. acc., earliest among equals); mean ± standard "
         "deviation over seeds. Δ: the cell's mean minus the default cell's mean (percentage points; steps for "
         "the best step)."),
        "",
    ]
    if shown:
        main, tokens = main_columns(*split_of(jobs)), token_columns(*split_of(jobs))
        lines.append(markdown_table(_header(main), _body(shown, main)))
        lines.append("Per-token accuracy (the share of target tokens predicted right) at the same best step:\n")
        lines.append(markdown_table(_header(tokens), _body(shown, tokens)))
    else:
        lines += ["No run of the plan has finished yet.", ""]
    lines += _waiting_and_sizes(table, shown)
    lo, hi = cfg.data.widths
    widths = "" if (lo, hi) == (1, 32) else f" --train-widths {lo}-{hi}"
    lines.append(f"Numbers above: `alignment.csv`; every width of every run (best and last step): "
                 f"`alignment_per_width.csv`. Figures (`alignment.png`, `alignment_per_width.png`): "
                 f"`lab plot ablation --table {_shown_path(out)}{widths}`.\n")
    return "\n".join(lines)


def _waiting_and_sizes(table: list[dict[str, Any]], shown: list[dict[str, Any]]) -> list[str]:
    """The lines after the tables: the mixers with no finished run yet, and the shown mixers' sizes."""
    lines = []
    waiting = list(dict.fromkeys(r["row"] for r in table if r not in shown))
    if waiting:
        lines += [f"Not yet run: {', '.join(waiting)}.", ""]
    params = {r["model"]: format_params(r["params"]) for r in shown if r["params"] is not None}
    if params:
        lines += ["Parameters: " + ", ".join(f"{name} {n}" for name, n in params.items()) + ".", ""]
    return lines


def _shown_path(out: Path) -> str:
    """`out` relative to the working directory when it lies below it (as a command would name it)."""
    try:
        return str(out.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(out)


def write_tables(jobs: Sequence[Job], results: Path, out: Path, command: str) -> int:
    """Write alignment.md, alignment.csv and alignment_per_width.csv to `out` from the finished runs of
    `jobs`; return how many runs are finished."""
    runs = finished_runs(jobs, results)
    table = summary_rows(jobs, runs)
    atomic_write_text(out / "alignment.md", render_markdown(jobs, table, runs, command, out))
    frame = pd.DataFrame(table)
    frame["params"] = frame["params"].astype("Int64")
    atomic_write_text(out / "alignment.csv", frame.to_csv(index=False))
    atomic_write_text(out / "alignment_per_width.csv",
                      pd.DataFrame(per_width_rows(runs, results), columns=PER_WIDTH_COLUMNS).to_csv(index=False))
    return len(runs)


# A synthetic task's measures at each run's best step: (key of falcon_lab.reproduce.sequences' best record, column of
# alignment.csv, header, decimals); the columns carry the addition table's names where they mean the same.
SEQUENCE_COLUMNS = (("val_acc", "val_acc", "Val. acc.", 1), ("ood_mean", "ood_mean", "Held-out acc.", 1),
                    ("val_token_acc", "token_val_acc", "Val. per token", 1),
                    ("ood_token_mean", "token_ood_mean", "Held-out per token", 1), ("reach", "reach", "Reach", 1))
PER_LENGTH_COLUMNS = ["row", "timing", "alignment", "cell", "seed", "run_id", "step", "length", "teacher_forced",
                      "per_token"]


def sequence_rows(jobs: Sequence[Job], runs: list[dict[str, Any]], bests: dict[str, dict[str, Any] | None]
                  ) -> list[dict[str, Any]]:
    """alignment.csv's rows on a synthetic task (`cell_rows` over each run's best evaluation in `bests`), with
    the train and held-out lengths."""
    d = jobs[0].cfg.data
    spans = {"val_lengths": f"{d.lengths[0]}–{d.lengths[1]}", "held_lengths": f"{d.test_lengths[0]}–{d.test_lengths[1]}"}
    measured = [r for r in runs if bests.get(r["job"].run_id) is not None]
    return cell_rows(jobs, measured, [(key, column) for key, column, _, _ in SEQUENCE_COLUMNS],
                     lambda run, key: bests[run["job"].run_id].get(key), spans)


def write_sequence_tables(jobs: Sequence[Job], results: Path, out: Path, command: str) -> int:
    """The ablation's tables on a synthetic task: alignment.md, alignment.csv and alignment_per_length.csv
    (every length of every run at its best step) in `out`; returns how many runs are finished."""
    runs = finished_runs(jobs, results)
    bests = {r["job"].run_id: best_of(r, results) for r in runs}
    table = sequence_rows(jobs, runs, bests)
    cfg, d = jobs[0].cfg, jobs[0].cfg.data
    shown = [r for r in table if any(o["runs"] for o in table if o["row"] == r["row"])]
    columns = [(column, f"{title} ({d.lengths[0]}–{d.lengths[1]})" if column.endswith("val_acc") else
                f"{title} ({d.test_lengths[0]}–{d.test_lengths[1]})" if "ood" in column else title, decimals)
               for _, column, title, decimals in SEQUENCE_COLUMNS]
    lines = [
        f"# Ablation: timing × write pairing on {cfg.task} (the paper's appendix C.5, Fig. 11)", "",
        provenance_sentence(jobs, runs, command), "",
        (f"Preset `{cfg.preset}`: d_model {cfg.model.d_model}, {cfg.model.n_layers} layers, {cfg.model.n_heads} "
         f"heads; {cfg.train.max_steps} steps of batch {cfg.train.batch_size}, lr {cfg.optim.lr:g}; train lengths "
         f"{d.lengths[0]}–{d.lengths[1]}, held out {d.test_lengths[0]}–{d.test_lengths[1]}; evaluated every "
         f"{cfg.train.val_every} steps with {cfg.eval.n_per_length} samples per length; seeds "
         f"{', '.join(str(s) for s in sorted({j.cfg.train.seed for j in jobs}))}."), "",
        ("Cells: timing RAW (write, then read: the output at t reads S_t) or RBW (read S_{t−1}, then write); "
         "write pairing shifted (x_t = k_{t−1} paired with v_t, x_1 = 0) or same-time (x_t = k_t). (default): the "
         "mixer's own paper's cell, RAW · shifted for Falcon and RAW · same-time for the baselines; that run is the "
         f"one `lab reproduce {cfg.task}` makes. Whole-sequence and per-token accuracy (%), each run at its best "
         "step (highest val. acc.); mean ± standard deviation over seeds; reach: the longest length up to which "
         f"every length is right in ≥ {REACHED:g}% of samples. Δ: the cell's mean minus the default cell's."), "",
    ]
    if shown:
        lines.append(markdown_table(_header(columns), _body(shown, columns)))
    else:
        lines += ["No run of the plan has finished yet.", ""]
    lines += _waiting_and_sizes(table, shown)
    lines.append(f"Numbers above: `alignment.csv`; every length of every run at its best step: "
                 f"`alignment_per_length.csv`. Figure (`alignment.png`): `lab plot ablation --table "
                 f"{_shown_path(out)}`.\n")
    atomic_write_text(out / "alignment.md", "\n".join(lines))
    frame = pd.DataFrame(table)
    frame["params"] = frame["params"].astype("Int64")
    atomic_write_text(out / "alignment.csv", frame.to_csv(index=False))
    cells = {r["job"].run_id: cell_of(r["job"]) for r in runs}
    per_length = [{"row": r["job"].cfg.mixer, "timing": cells[r["job"].run_id].timing,
                   "alignment": cells[r["job"].run_id].alignment, "cell": cells[r["job"].run_id].name,
                   "seed": r["seed"], "run_id": r["job"].run_id, "step": best["step"], "length": n,
                   "teacher_forced": acc, "per_token": best.get("per_token", {}).get(n)}
                  for r in runs if (best := bests[r["job"].run_id]) is not None
                  for n, acc in sorted(best.get("teacher_forced", {}).items())]
    atomic_write_text(out / "alignment_per_length.csv",
                      pd.DataFrame(per_length, columns=PER_LENGTH_COLUMNS).to_csv(index=False))
    return len(runs)
