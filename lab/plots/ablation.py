"""`lab plot ablation`: the alignment ablation's 2×2 grid as heat maps, and its per-width curves.

alignment.png: one row per mixer, one 2×2 heat map per measure (val. acc., mean 33–48, and per-token
mean 33–48 when the table has it). Laid out as the paper's Fig. 11: columns timing RBW, RAW; rows
pairing same-time ϕ(k_t), shifted ϕ(k_{t−1}); each cell reads mean ± std over seeds, the mixer's
default cell is framed. alignment_per_width.png (when alignment_per_width.csv is there): per mixer,
accuracy against width, one line per cell.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.patches import Rectangle

from lab.plots.addition import (
    EXTRAPOLATION,
    draw_curves,
    has_values,
    marked_widths,
    palette,
    read_per_width,
    shade_widths,
)
from lab.plots.figure import new_figure, save_png, styled
from lab.plots.tables import read_table

TIMINGS = ("rbw", "raw")
PAIRINGS = (("same_time", r"same-time $\phi(k_t)$"), ("shifted", r"shifted $\phi(k_{t-1})$"))
# Heat map measures: (column prefix in alignment.csv, title); the per-token one only when present.
MEASURES = (("val_acc", "Val. acc. (widths 1–32)"), ("ood_mean", "Mean 33–48"),
            ("token_ood_mean", "Per-token mean 33–48"))
MADE_BY = "lab ablate alignment"
CURVES = (("teacher_forced", "whole answer"), ("per_token", "per token"))


def read_alignment(path: Path) -> pd.DataFrame:
    """alignment.csv's rows of mixers with finished runs; ValueError naming the file and the column."""
    frame = read_table(path, numbers=("runs", "val_acc_mean", "ood_mean_mean"),
                       texts=("row", "timing", "alignment", "default"),
                       optional=("val_acc_std", "ood_mean_std", "token_ood_mean_mean", "token_ood_mean_std"),
                       made_by=MADE_BY)
    for column, accepted in (("timing", TIMINGS), ("alignment", tuple(p for p, _ in PAIRINGS)),
                             ("default", ("True", "False"))):
        bad = frame[~frame[column].isin(accepted)]
        if not bad.empty:
            raise ValueError(f"{path}: column {column!r} holds {bad[column].iloc[0]!r}; "
                             f"accepted: {', '.join(accepted)}")
    ran = frame.groupby("row", sort=False)["runs"].transform("sum") > 0
    if not ran.any():
        raise ValueError(f"{path}: no mixer has a finished run yet")
    return frame[ran]


def heatmap(ax: Axes, cells: pd.DataFrame, measure: str, title: str) -> object:
    """Draw one mixer's 2×2 grid of `measure` on `ax` (colour scale 0–100); return the image."""
    values = np.full((len(PAIRINGS), len(TIMINGS)), np.nan)
    texts = [["—"] * len(TIMINGS) for _ in PAIRINGS]
    default = None
    for i, (pairing, _) in enumerate(PAIRINGS):
        for j, timing in enumerate(TIMINGS):
            row = cells[(cells["alignment"] == pairing) & (cells["timing"] == timing)]
            if row.empty:
                continue
            record = row.iloc[0]
            if record["default"] == "True":
                default = (i, j)
            mean = record.get(f"{measure}_mean")
            if mean is None or pd.isna(mean):
                continue
            values[i, j] = mean
            std = record.get(f"{measure}_std")
            texts[i][j] = f"{mean:.1f}" + ("" if std is None or pd.isna(std) else f"\n± {std:.1f}")
    image = ax.imshow(np.ma.masked_invalid(values), cmap="viridis", vmin=0, vmax=100)
    for i in range(len(PAIRINGS)):
        for j in range(len(TIMINGS)):
            dark = np.isnan(values[i, j]) or values[i, j] < 60
            ax.text(j, i, texts[i][j], ha="center", va="center", fontsize="small",
                    color="white" if dark and not np.isnan(values[i, j]) else "black")
    if default is not None:
        i, j = default
        ax.add_patch(Rectangle((j - 0.47, i - 0.47), 0.94, 0.94, fill=False, ec="tab:red", lw=2.5))
    ax.set_xticks(range(len(TIMINGS)), [t.upper() for t in TIMINGS])
    ax.set_yticks(range(len(PAIRINGS)), [label for _, label in PAIRINGS])
    ax.grid(False)
    ax.set_title(title, fontsize="medium")
    return image


def plot_heatmaps(table: Path, out: Path, command: str) -> Path:
    """alignment.png from alignment.csv."""
    source = table / "alignment.csv"
    frame = read_alignment(source)
    measures = [(m, t) for m, t in MEASURES if has_values(frame, f"{m}_mean")]
    mixers = list(dict.fromkeys(frame["row"]))
    with styled():
        fig = new_figure(3.6 * len(measures) + 1.5, 2.9 * len(mixers) + 0.8)
        axes = fig.subplots(len(mixers), len(measures), squeeze=False)
        image = None
        for r, mixer in enumerate(mixers):
            cells = frame[frame["row"] == mixer]
            for c, (measure, title) in enumerate(measures):
                image = heatmap(axes[r, c], cells, measure, f"{mixer}: {title}")
        fig.colorbar(image, ax=axes, shrink=0.6, label="accuracy (%)")
        fig.suptitle(f"Timing × write pairing (framed: the mixer's default cell) — {source.as_posix()}",
                     fontsize="medium")
    return save_png(fig, out / "alignment.png", source.as_posix(), command)


def plot_cell_curves(table: Path, out: Path, train_widths: tuple[int, int], command: str) -> Path:
    """alignment_per_width.png from alignment_per_width.csv: per mixer, accuracy against width by cell."""
    source = table / "alignment_per_width.csv"
    frame = read_per_width(source, keys=("row", "cell"), made_by=MADE_BY)
    curves = [(c, t) for c, t in CURVES if has_values(frame, c)]
    mixers = list(dict.fromkeys(frame["row"]))
    colors = palette(list(dict.fromkeys(frame["cell"])))
    held_out = marked_widths(frame, "held_out") or EXTRAPOLATION
    widest = max(int(frame["width"].max()), held_out[1])
    with styled():
        fig = new_figure(5.5 * len(curves) + 2, 3.6 * len(mixers) + 0.6)
        axes = fig.subplots(len(mixers), len(curves), squeeze=False)
        for r, mixer in enumerate(mixers):
            for c, (column, what) in enumerate(curves):
                ax = axes[r, c]
                shade_widths(ax, train_widths, held_out, widest)
                draw_curves(ax, frame[frame["row"] == mixer], column, "cell", colors)
                ax.set_title(f"{mixer}: {what}", fontsize="medium")
        handles, labels = axes[0, 0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right upper", fontsize="small")
        fig.suptitle(f"Accuracy by width at each run's best step, per cell — {source.as_posix()}",
                     fontsize="medium")
    return save_png(fig, out / "alignment_per_width.png", source.as_posix(), command)


def plot_ablation(table: str | Path, out: str | Path | None = None, train_widths: tuple[int, int] = (1, 32),
                  command: str = "lab plot ablation") -> list[Path]:
    """Draw alignment.png (and alignment_per_width.png when its CSV is there) into `out` (default:
    `table`) from the ablation's tables in `table`. Returns the files written."""
    table = Path(table)
    out = Path(out) if out is not None else table
    files = [plot_heatmaps(table, out, command)]
    if (table / "alignment_per_width.csv").is_file():
        files.append(plot_cell_curves(table, out, train_widths, command))
    return files
