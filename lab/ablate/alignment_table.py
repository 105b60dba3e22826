"""The alignment ablation's tables from finished runs: alignment.md, alignment.csv, alignment_per_width.csv.

One row per mixer and cell: the addition table's numbers (each run at its best step, mean ± sample
standard deviation over seeds) and, for each, the cell's mean minus the mean of the mixer's default
cell (the cell of its own paper).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from lab.ablate.cells import CELLS, cell_of, default_cell
from lab.reproduce.addition_rows import ROW_BY_NAME
from lab.reproduce.addition_table import (
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
from lab.reproduce.jobs import Job
from lab.runs import atomic_write_text

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


def summary_rows(jobs: Sequence[Job], runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """alignment.csv's rows: one per mixer and cell of the plan (mixers in plan order, cells in CELLS order)."""
    planned: dict[tuple[str, Any], int] = {}
    for job in jobs:
        key = (job.cfg.mixer, cell_of(job))
        planned[key] = planned.get(key, 0) + 1
    mixers = list(dict.fromkeys(mixer for mixer, _ in planned))
    columns = metrics(*split_of(jobs))
    table = []
    for mixer in mixers:
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
                "seeds": " ".join(str(r["seed"]) for r in mine)}
            for metric, column, _, _ in columns:
                values = [float(r["metrics"][metric]) for r in mine if r["metrics"].get(metric) is not None]
                record[f"{column}_mean"], record[f"{column}_std"] = mean_std(values)
            records[cell] = record
        base = records.get(default)
        for record in records.values():
            for _, column, _, _ in columns:
                mean = record[f"{column}_mean"]
                ref = base[f"{column}_mean"] if base is not None else None
                record[f"{column}_delta"] = None if mean is None or ref is None else mean - ref
        table.extend(records.values())
    return table


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
    waiting = list(dict.fromkeys(r["row"] for r in table if r not in shown))
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
    if waiting:
        lines += [f"Not yet run: {', '.join(waiting)}.", ""]
    params = {r["model"]: format_params(r["params"]) for r in shown if r["params"] is not None}
    if params:
        lines += ["Parameters: " + ", ".join(f"{name} {n}" for name, n in params.items()) + ".", ""]
    lo, hi = cfg.data.widths
    widths = "" if (lo, hi) == (1, 32) else f" --train-widths {lo}-{hi}"
    lines.append(f"Numbers above: `alignment.csv`; every width of every run (best and last step): "
                 f"`alignment_per_width.csv`. Figures (`alignment.png`, `alignment_per_width.png`): "
                 f"`lab plot ablation --table {_shown_path(out)}{widths}`.\n")
    return "\n".join(lines)


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
