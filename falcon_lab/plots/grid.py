"""Small multiples and the names on them: one panel per model, named as the paper names it, with the trained
widths read from what the runs were given (never assumed)."""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

import pandas as pd
import yaml
from matplotlib.axes import Axes
from matplotlib.figure import Figure

# Colours told apart in print and by most colour-blind readers (the Okabe–Ito set, black last).
DISTINCT = ("#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000")
PANEL_COLUMNS = 4


def grid_columns(count: int, columns: int = PANEL_COLUMNS) -> int:
    """Panels to a row for `count` panels: at most `columns`, as few as keep the rows as many (9 as 3 × 3,
    not 4 + 4 + 1)."""
    rows = math.ceil(count / columns)
    return max(1, math.ceil(count / rows))


def legend_columns(fig: Figure, entries: int, inches: float = 2.1) -> int:
    """Legend columns that fit the figure's width, about `inches` an entry."""
    return max(1, min(entries, int(fig.get_figwidth() / inches)))


def panels(fig: Figure, count: int, width: float = 3.4, height: float = 2.7, columns: int = PANEL_COLUMNS,
           sharex: bool = True, sharey: bool = True, min_width: float = 6.5) -> list[Axes]:
    """`count` panels (sharing both axes unless told), `grid_columns` to a row; the figure sized to
    `width` × `height` inches a panel, and at least `min_width` wide so that titles and legends fit.
    Unused places of the last row are hidden."""
    cols = grid_columns(count, columns)
    rows = math.ceil(count / cols)
    fig.set_size_inches(max(width * cols + 0.6, min_width), height * rows + 1.3)
    grid = fig.subplots(rows, cols, squeeze=False, sharex=sharex, sharey=sharey)
    flat = list(grid.flat)
    for ax in flat[count:]:
        ax.set_visible(False)
    for i, ax in enumerate(flat[:count]):
        if i + cols >= count:  # no panel below: this one carries the width ticks
            ax.tick_params(labelbottom=True)
    return flat[:count]


def outer_labels(axes: Sequence[Axes], xlabel: str, ylabel: str, columns: int = PANEL_COLUMNS) -> None:
    """The x label under the bottom panel of each column, the y label beside the first panel of each row."""
    cols = grid_columns(len(axes), columns)
    for i, ax in enumerate(axes):
        ax.set_xlabel(xlabel if i + cols >= len(axes) else "")
        ax.set_ylabel(ylabel if i % cols == 0 else "")


def display_names(keys: Iterable[str], frame: pd.DataFrame, table: Path | None = None,
                  key: str = "row") -> dict[str, str]:
    """The name each table row has in the paper's tables ("Falcon-1A.3 (QK-RMSNorm, ctxη-ctxλ)"): the
    frame's `model` column, else the `model` column of table.csv beside it, else the row's own name."""
    names: dict[str, str] = {}
    sources = [frame]
    if table is not None and (table / "table.csv").is_file():
        try:
            sources.append(pd.read_csv(table / "table.csv", dtype=str, keep_default_na=False))
        except (pd.errors.ParserError, pd.errors.EmptyDataError, UnicodeDecodeError):
            pass  # names only: a table.csv that does not read leaves the rows' own names
    for source in sources:
        if key in source.columns and "model" in source.columns:
            for row, model in zip(source[key].astype(str), source["model"].astype(str)):
                if model and model != "nan":
                    names.setdefault(row, model)
    return {k: names.get(k, k) for k in keys}


def two_lines(name: str, width: int = 36) -> str:
    """A long display name as a panel title: the settings in brackets on a line of their own, and settings longer
    than `width` characters broken at their semicolons (a row's own options after the paper's)."""
    head, sep, tail = name.partition(" (")
    if not (sep and len(name) > 22):
        return name
    if len(tail) > width:
        tail = tail.replace("; ", ";\n")
    return f"{head}\n({tail}"


WIDTHS_IN_TEXT = re.compile(r"train widths (\d+)[–-](\d+)")


def recorded_train_widths(table: Path, frame: pd.DataFrame, texts: Sequence[str] = ("table.md",)
                          ) -> tuple[int, int] | None:
    """The widths the table's runs trained on, from what they were given: the CSV's `trained` column, else
    the runs' own config.yaml (`<table>/runs/<run_id>/config.yaml`, data.widths; the widest span over the
    runs), else the preset line the table's markdown printed from those configs ("train widths 1–8").
    None when none of these is there: the figure then shades nothing rather than guess."""
    if "trained" in frame.columns:
        marked = frame.loc[frame["trained"].astype(str).str.lower() == "true", "width"]
        if not marked.empty:
            return int(marked.min()), int(marked.max())
    spans = []
    for run_id in dict.fromkeys(frame["run_id"].astype(str)) if "run_id" in frame.columns else ():
        config = table / "runs" / run_id / "config.yaml"
        if config.is_file():
            widths = ((yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("data") or {}).get("widths")
            if isinstance(widths, list) and len(widths) == 2:
                spans.append((int(widths[0]), int(widths[1])))
    if spans:
        return min(lo for lo, _ in spans), max(hi for _, hi in spans)
    for name in texts:
        path = table / name
        if path.is_file():
            found = WIDTHS_IN_TEXT.search(path.read_text(encoding="utf-8"))
            if found:
                return int(found.group(1)), int(found.group(2))
    return None
