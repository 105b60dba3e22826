"""The addition table as the terminal shows it when a campaign ends: one line per row, whole-answer accuracy
on the trained (validation) widths and on the held-out ones, per-token accuracy on both, each as mean ± std
over the seeds with every seed's value, the widths answered and the best step. The widths in the headers
are the runs' own (`eval.widths`, `eval.held_out_from`), never the paper's unless the runs used them."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

from falcon_lab.reproduce.addition_table import finished_runs, format_cell, span, split_of, summary_rows
from falcon_lab.reproduce.jobs import Job


def _seeds(runs: list[dict[str, Any]], metric: str) -> str:
    values = [r["metrics"].get(metric) for r in sorted(runs, key=lambda r: r["seed"])]
    return " / ".join("—" if v is None else f"{float(v):.1f}" for v in values)


def summary_table(jobs: Sequence[Job], results: Path) -> Table:
    """The table of the finished runs of the planned `jobs` (see the module docstring)."""
    val, held_out = split_of(jobs)
    runs = finished_runs(jobs, results)
    v, o = span(val), span(held_out)
    table = Table(title=f"Addition: whole answers right (%, teacher-forced), trained widths {v}, held out {o}",
                  title_justify="left")
    table.add_column("Model")
    table.add_column("Runs", justify="right")
    table.add_column(f"Widths {v}", justify="right")
    table.add_column("by seed", justify="right")
    table.add_column(f"Held out {o}", justify="right")
    table.add_column("by seed", justify="right")
    table.add_column(f"Per token {v}", justify="right")
    table.add_column(f"Per token {o}", justify="right")
    table.add_column("Widths answered", justify="right")
    table.add_column("Best step", justify="right")
    for row in summary_rows(jobs, runs):
        mine = [r for r in runs if r["job"].cfg.mixer == row["row"]]

        def cell(column: str, decimals: int = 1) -> str:
            return format_cell(row[f"{column}_mean"], row[f"{column}_std"], decimals)

        table.add_row(row["model"], f"{row['runs']}/{row['planned']}", cell("val_acc"),
                      _seeds(mine, "best_val_acc") if mine else "—", cell("ood_mean"),
                      _seeds(mine, "best_ood_mean") if mine else "—", cell("token_val_acc"), cell("token_ood_mean"),
                      cell("widths"), cell("best_step", 0))
    return table
