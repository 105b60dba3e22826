"""`lab plot ablation`: the alignment ablation's 2×2 grid as heat maps, and its per-width curves.

alignment.png: one band per mixer (named as the tables name it), one 2×2 heat map per measure (val. acc.,
the held-out mean, and the per-token held-out mean when the table has it; their widths read from the
table's columns). Laid out as the paper's Fig. 11: columns timing RBW, RAW; rows pairing same-time ϕ(k_t),
shifted ϕ(k_{t−1}); each cell reads mean ± std over seeds, the mixer's default cell is framed.
alignment_per_width.png (when alignment_per_width.csv is there): one panel per mixer and measure, accuracy
against width, one line per cell in four distinct colours.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle

from falcon_lab.plots.addition import EXTRAPOLATION, draw_mean, has_values, marked_widths, read_per_width, shade_widths, span
from falcon_lab.plots.figure import new_figure, save_png, shown, styled
from falcon_lab.plots.grid import DISTINCT, display_names, recorded_train_widths, two_lines
from falcon_lab.plots.tables import read_table

TIMING_COLUMNS = ("rbw", "raw")  # the heat maps' columns, left to right (Fig. 11's order)
PAIRINGS = (("same_time", r"same-time $\phi(k_t)$"), ("shifted", r"shifted $\phi(k_{t-1})$"))
# Heat map measures: (column prefix in alignment.csv, title with {val} and {held} for the widths or lengths);
# the per-token one only when present.
MEASURES = (("val_acc", "Val. acc. ({val})"), ("ood_mean", "Mean {held}"),
            ("token_ood_mean", "Per-token mean {held}"))
MADE_BY = "lab ablate alignment"
CURVES = (("teacher_forced", "whole answer"), ("per_token", "per token"))


def read_alignment(path: Path) -> pd.DataFrame:
    """alignment.csv's rows of mixers with finished runs; ValueError naming the file and the column."""
    frame = read_table(path, numbers=("runs", "val_acc_mean", "ood_mean_mean"),
                       texts=("row", "timing", "alignment", "default"),
                       optional=("val_acc_std", "ood_mean_std", "token_ood_mean_mean", "token_ood_mean_std"),
                       made_by=MADE_BY)
    for column, accepted in (("timing", TIMING_COLUMNS), ("alignment", tuple(p for p, _ in PAIRINGS)),
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
    values = np.full((len(PAIRINGS), len(TIMING_COLUMNS)), np.nan)
    texts = [["—"] * len(TIMING_COLUMNS) for _ in PAIRINGS]
    default = None
    for i, (pairing, _) in enumerate(PAIRINGS):
        for j, timing in enumerate(TIMING_COLUMNS):
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
        for j in range(len(TIMING_COLUMNS)):
            dark = np.isnan(values[i, j]) or values[i, j] < 60
            ax.text(j, i, texts[i][j], ha="center", va="center", fontsize="small",
                    color="white" if dark and not np.isnan(values[i, j]) else "black")
    if default is not None:
        i, j = default
        ax.add_patch(Rectangle((j - 0.47, i - 0.47), 0.94, 0.94, fill=False, ec="tab:red", lw=2.5))
    ax.set_xticks(range(len(TIMING_COLUMNS)), [t.upper() for t in TIMING_COLUMNS])
    ax.set_yticks(range(len(PAIRINGS)), [label for _, label in PAIRINGS])
    ax.grid(False)
    ax.set_title(title, fontsize="medium")
    return image


def measured_widths(frame: pd.DataFrame) -> tuple[str, str]:
    """The validation and held-out widths of alignment.csv's measures, as labels ("widths 1–32", "33–48"), from
    its Acc@ columns (acc33_mean … acc48_mean: the first and last held-out width); the paper's without them. A
    synthetic task's table names its lengths (val_lengths, held_lengths: "lengths 16–32", "lengths 33–64")."""
    if "val_lengths" in frame.columns and "held_lengths" in frame.columns:
        return f"lengths {frame['val_lengths'].iloc[0]}", f"lengths {frame['held_lengths'].iloc[0]}"
    held = sorted(int(c[3:-5]) for c in frame.columns if c.startswith("acc") and c.endswith("_mean")
                  and c[3:-5].isdigit())
    first, last = (held[0], held[-1]) if held else EXTRAPOLATION
    return f"widths {span(1, first - 1)}", span(first, last)


def cell_label(timing: str, pairing: str) -> str:
    """A cell as the tables name it: "RAW · same-time"."""
    return f"{timing.upper()} · {pairing.replace('_', '-')}"


def default_cell(cells: pd.DataFrame | None, mixer: str) -> str | None:
    """The mixer's default cell ("raw/shifted") as alignment.csv marks it; None without the table."""
    if cells is None:
        return None
    mine = cells[(cells["row"] == mixer) & (cells["default"] == "True")]
    return None if mine.empty else f"{mine['timing'].iloc[0]}/{mine['alignment'].iloc[0]}"


def plot_heatmaps(table: Path, out: Path, command: str) -> Path:
    """alignment.png from alignment.csv."""
    source = table / "alignment.csv"
    frame = read_alignment(source)
    val, held = measured_widths(frame)
    measures = [(m, t.format(val=val, held=held)) for m, t in MEASURES if has_values(frame, f"{m}_mean")]
    mixers = list(dict.fromkeys(frame["row"]))
    names = display_names(mixers, frame)
    with styled():
        fig = new_figure(2.9 * len(measures) + 2.4, 2.9 * len(mixers) + 1.0)
        bands = fig.subfigures(len(mixers), 1, squeeze=False)[:, 0]
        for band, mixer in zip(bands, mixers):
            cells = frame[frame["row"] == mixer]
            axes = band.subplots(1, len(measures), squeeze=False)[0]
            for c, (ax, (measure, title)) in enumerate(zip(axes, measures)):
                image = heatmap(ax, cells, measure, title)
                if c:
                    ax.tick_params(labelleft=False)
            band.suptitle(names[mixer], fontsize="medium", fontweight="bold")
            band.colorbar(image, ax=list(axes), shrink=0.8, label="accuracy (%)")
        fig.suptitle("Timing × write pairing: teacher-forced accuracy (%) at each run's best step, mean ± std\n"
                     f"framed: the mixer's default cell ({shown(source)})", fontsize="medium")
    return save_png(fig, out / "alignment.png", shown(source), command)


def plot_cell_curves(table: Path, out: Path, train_widths: tuple[int, int] | None, command: str) -> Path:
    """alignment_per_width.png from alignment_per_width.csv: per mixer and measure, accuracy against width
    by cell. The trained widths shaded are `train_widths`, else those the runs were given, else none."""
    source = table / "alignment_per_width.csv"
    frame = read_per_width(source, keys=("row", "cell"), made_by=MADE_BY)
    cells = read_alignment(table / "alignment.csv") if (table / "alignment.csv").is_file() else None
    curves = [(c, t) for c, t in CURVES if has_values(frame, c)]
    mixers = list(dict.fromkeys(frame["row"]))
    names = display_names(mixers, cells if cells is not None else frame)
    order = [f"{t}/{p}" for t in TIMING_COLUMNS[::-1] for p, _ in PAIRINGS[::-1]]
    present = [c for c in order if c in set(frame["cell"])] + sorted(set(frame["cell"]) - set(order))
    colors = dict(zip(present, DISTINCT))
    train = train_widths or recorded_train_widths(table, frame, texts=("alignment.md",))
    held_out = marked_widths(frame, "held_out") or EXTRAPOLATION
    widest = max(int(frame["width"].max()), held_out[1])
    shading = 2 if train else 1  # the first legend entries of a panel: its shaded widths, not its cells
    with styled():
        fig = new_figure(4.6 * len(curves) + 2.8, 3.0 * len(mixers) + 1.0)
        axes = fig.subplots(len(mixers), len(curves), squeeze=False, sharex=True, sharey=True)
        for r, mixer in enumerate(mixers):
            mine = frame[frame["row"] == mixer]
            default = default_cell(cells, mixer)
            for c, (column, what) in enumerate(curves):
                ax = axes[r, c]
                shade_widths(ax, train, held_out, widest)
                for cell in present:
                    timing, _, pairing = cell.partition("/")
                    label = cell_label(timing, pairing) + (" (default)" if cell == default else "")
                    draw_mean(ax, mine[mine["cell"] == cell], column, colors[cell], label,
                              ls="-" if cell == default or default is None else (0, (5, 1.5)))
                ax.set_title(f"{two_lines(names[mixer])}: {what}" if len(names[mixer]) <= 22
                             else f"{two_lines(names[mixer])}\n{what}", fontsize="small")
                ax.set_xlabel("operand width (digits)" if r == len(mixers) - 1 else "")
                ax.set_ylabel("accuracy (%)" if c == 0 else "")
            handles, labels = axes[r, 0].get_legend_handles_labels()
            axes[r, -1].legend(handles[shading:], labels[shading:], loc="center left",
                               bbox_to_anchor=(1.02, 0.5), fontsize="x-small", frameon=False)
        handles, labels = axes[0, 0].get_legend_handles_labels()
        extra = [] if train else ["trained widths: not recorded"]
        fig.legend(handles[:shading] + ([Line2D([], [], ls="none")] if extra else []), labels[:shading] + extra,
                   loc="outside lower center", ncols=3, fontsize="small")
        fig.suptitle(f"Accuracy by width at each run's best step, per cell\n({shown(source)})", fontsize="medium")
    return save_png(fig, out / "alignment_per_width.png", shown(source), command)


def plot_ablation(table: str | Path, out: str | Path | None = None, train_widths: tuple[int, int] | None = None,
                  command: str = "lab plot ablation") -> list[Path]:
    """Draw alignment.png (and alignment_per_width.png when its CSV is there) into `out` (default:
    `table`) from the ablation's tables in `table`. Returns the files written."""
    table = Path(table)
    out = Path(out) if out is not None else table
    files = [plot_heatmaps(table, out, command)]
    if (table / "alignment_per_width.csv").is_file():
        files.append(plot_cell_curves(table, out, train_widths, command))
    return files
