"""The report's markdown tables, from the records' CSV files as they are (no number made or changed here)."""

from __future__ import annotations

import re
from collections.abc import Sequence

import pandas as pd


def number(value: object, digits: int = 1) -> str:
    """A number as the tables print it; "—" for an empty cell."""
    try:
        x = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return "—"
    return "—" if pd.isna(x) else f"{x:.{digits}f}"


def mean_std(row: pd.Series, column: str, digits: int = 1) -> str:
    """`<column>_mean ± <column>_std` of a table row (the std left out where there is none)."""
    mean, std = number(row.get(f"{column}_mean"), digits), number(row.get(f"{column}_std"), digits)
    return mean if mean == "—" or std == "—" else f"{mean} ± {std}"


def markdown_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """A markdown table; `|` inside a cell kept from breaking it."""
    cells = [[str(c).replace("|", "/") for c in row] for row in rows]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in cells])


def held_out_widths(frame: pd.DataFrame) -> list[int]:
    """The first and last held-out widths a table reports (its acc<N>_mean columns): [33, 48], [7, 10]."""
    return sorted(int(m.group(1)) for c in frame.columns if (m := re.fullmatch(r"acc(\d+)_mean", c)))


def span_of(widths: Sequence[int]) -> str:
    return f"{widths[0]}–{widths[-1]}" if widths else "held out"


def addition_table(frame: pd.DataFrame) -> str:
    """Table 3: ours beside the paper's (where the table has the paper's columns), each row at its best step."""
    held = held_out_widths(frame)
    val = f"1–{held[0] - 1}" if held else "trained"
    paper = "paper_val_acc" in frame.columns
    header = ["Model", "Runs"]
    measures = [("val_acc", f"Val. acc. {val}"), ("ood_mean", f"Mean {span_of(held)}"),
                *((f"acc{n}", f"Acc@{n}") for n in held)]
    for column, title in measures:
        header += [f"{title} (paper)", title] if paper else [title]
    rows = []
    for _, row in frame.iterrows():
        cells = [str(row.get("model") or row["row"]), f"{row.get('runs', '—')}/{row.get('planned', '—')}"]
        for column, _ in measures:
            if paper:
                cells.append(number(row.get(f"paper_{column}")))
            cells.append(mean_std(row, column) if int(float(row.get("runs") or 0)) else "—")
        rows.append(cells)
    return markdown_table(header, rows)


def best_of(frame: pd.DataFrame, column: str) -> str:
    """The table's best row on `column` (mean over seeds): "Model 73.8 ± 32.0"; "—" when none ran."""
    ran = frame[pd.to_numeric(frame.get(f"{column}_mean"), errors="coerce").notna()] \
        if f"{column}_mean" in frame.columns else frame.iloc[0:0]
    if ran.empty:
        return "—"
    best = ran.loc[pd.to_numeric(ran[f"{column}_mean"]).idxmax()]
    return f"{best.get('model') or best['row']} {mean_std(best, column)}"


def ablation_table(frame: pd.DataFrame) -> str:
    """The alignment ablation, a row per mixer and cell: runs, val. acc., held-out mean, per-token held-out (a
    synthetic task's table names its held-out lengths)."""
    if "held_lengths" in frame.columns and len(frame):
        held = f"lengths {frame['held_lengths'].iloc[0]}"
    else:
        held = span_of(held_out_widths(frame))
    header = ["Mixer", "Cell", "Runs", "Val. acc.", f"Mean {held}", f"Per-token mean {held}"]
    rows = []
    for _, row in frame.iterrows():
        cell = f"{str(row['timing']).upper()} · {str(row['alignment']).replace('_', '-')}"
        if str(row.get("default")) == "True":
            cell += " (default)"
        rows.append([str(row.get("model") or row["row"]), cell, f"{row.get('runs', '—')}/{row.get('planned', '—')}",
                     mean_std(row, "val_acc"), mean_std(row, "ood_mean"), mean_std(row, "token_ood_mean")])
    return markdown_table(header, rows)


ANCHOR = "x_fla chunk_delta_rule"


def kernels_table(frame: pd.DataFrame) -> str:
    """Our kernels' times with their ratio to fla's delta rule and to SDPA (below 1: faster)."""
    ours = frame[~frame["op"].str.startswith(("fla ", "torch "))]
    header = ["Shape (B×T×H×D)", "Op", "Mode", "ms", "× fla chunk_delta_rule", "× SDPA", "Status"]
    rows = [[r["shape"], r["op"], r["mode"], number(r.get("ms"), 3), number(r.get(ANCHOR), 2),
             number(r.get("x_torch SDPA causal"), 2), str(r.get("status") or "").split(":")[0]]
            for _, r in ours.iterrows()]
    return markdown_table(header, rows)
