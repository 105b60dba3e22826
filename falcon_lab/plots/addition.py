"""`lab plot addition`: accuracy against operand width, one panel per table row, from per_width.csv;
and, where the table has progress.csv, the widths answered and the validation accuracy against the step, and (where
it holds each width's accuracy, `tf@<n>`) a heat map of whole answers by width and step.

per_width.png: small multiples, one panel per row named as the table names it (per_width.csv's `model`
column, else table.csv's), whole-answer accuracy solid and per-token accuracy dashed, each run taken at its
best step (the `which == "best"` rows); a line is the mean over the row's seeds with a band of ± one standard
deviation when it has several, clipped to 0–100. progress.png: one panel per row, every run its own line.
heatmap.png: one panel per row, the median over seeds of each width's whole answers at each evaluation. The
trained widths are shaded as the runs were given them (per_width.csv's `trained` column, else the runs'
config.yaml, else the table's preset line; nothing shaded when none says) and the held-out ones marked.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes
from matplotlib.lines import Line2D
from matplotlib.patches import Patch

from falcon_lab.plots.figure import new_figure, save_png, shown, styled
from falcon_lab.plots.grid import (
    DISTINCT,
    display_names,
    grid_columns,
    legend_columns,
    outer_labels,
    panels,
    recorded_train_widths,
    two_lines,
)
from falcon_lab.plots.tables import read_table

WIDEST = 48
EXTRAPOLATION = (33, 48)
# Which accuracy each panel shows: (column of per_width.csv, panel title).
PANELS = (("teacher_forced", "Whole-answer accuracy (teacher-forced)"),
          ("per_token", "Per-token accuracy (teacher-forced)"))
MADE_BY = "lab reproduce addition"


def parse_widths(text: str) -> tuple[int, int]:
    """`LO-HI` (e.g. 1-32) as a pair; ValueError naming the option and the accepted form."""
    lo, sep, hi = text.partition("-")
    try:
        widths = (int(lo), int(hi)) if sep else None
    except ValueError:
        widths = None
    if widths is None or not 1 <= widths[0] <= widths[1] <= WIDEST:
        raise ValueError(f"--train-widths {text!r} is not accepted; accepted: LO-HI with 1 <= LO <= HI <= {WIDEST}, "
                         f"e.g. 1-32")
    return widths


def read_per_width(path: Path, keys: Sequence[str] = ("row",), made_by: str = MADE_BY) -> pd.DataFrame:
    """The best-step rows of a per-width CSV with columns `keys`, seed, which, width, teacher_forced
    (per_token optional); ValueError naming the file and the column when it is malformed."""
    frame = read_table(path, numbers=("seed", "width", "teacher_forced"), texts=(*keys, "which"),
                       optional=("per_token",), made_by=made_by)
    if "model" in frame.columns:
        frame["model"] = frame["model"].fillna("").astype(str)
    best = frame[frame["which"] == "best"]
    if best.empty:
        raise ValueError(f"{path}: no rows with which=best (each run's best step)")
    outside = best[(best["width"] < 1) | (best["width"] > WIDEST)]
    if not outside.empty:
        raise ValueError(f"{path}: column 'width' holds {outside['width'].iloc[0]:g}; accepted: 1 to {WIDEST}")
    return best


def has_values(frame: pd.DataFrame, column: str) -> bool:
    """Whether `frame` has the column with at least one value."""
    return column in frame.columns and bool(frame[column].notna().any())


def shade_widths(ax: Axes, train: tuple[int, int] | None, held_out: tuple[int, int] = EXTRAPOLATION,
                 widest: int = WIDEST) -> None:
    """Shade the trained widths (none when `train` is None: not recorded) and mark the held-out ones (the
    paper's 33–48) as extrapolation, on an axis of widths 1 to `widest`."""
    if train is not None:
        lo, hi = train
        ax.axvspan(lo - 0.5, hi + 0.5, color="tab:green", alpha=0.10, lw=0, label=f"trained widths {span(lo, hi)}")
    ax.axvspan(held_out[0] - 0.5, held_out[1] + 0.5, color="tab:red", alpha=0.06, lw=0,
               label=f"held out {span(*held_out)}")
    ax.axvline(held_out[0] - 0.5, color="tab:red", lw=1, ls="--")
    ax.set_xlim(0.5, widest + 0.5)
    if widest <= 16:  # every width a tick where they fit
        ax.set_xticks(range(1, widest + 1))
    ax.set_ylim(-3, 103)
    ax.set_xlabel("operand width (digits)")
    ax.set_ylabel("accuracy (%)")


def span(lo: int, hi: int) -> str:
    """Widths lo to hi as a label: 1–32, or 7 for one width."""
    return f"{lo}–{hi}" if hi > lo else f"{lo}"


def marked_widths(frame: pd.DataFrame, column: str) -> tuple[int, int] | None:
    """The first and last width where per_width.csv's boolean `column` (trained, held_out) is true; None
    when the file has no such column or no such width."""
    if column not in frame.columns:
        return None
    widths = frame.loc[frame[column].astype(str).str.lower() == "true", "width"]
    return None if widths.empty else (int(widths.min()), int(widths.max()))


def draw_mean(ax: Axes, frame: pd.DataFrame, column: str, color: object, label: str, x: str = "width",
              ls: str = "-") -> int:
    """The mean of `column` over the seeds in `frame` at each `x`, with a ± one standard deviation band
    (clipped to 0–100: accuracies) where several seeds are present; returns how many seeds there are."""
    mine = frame.dropna(subset=[column])
    if mine.empty:
        return 0
    stats = mine.groupby(x)[column].agg(["mean", "std", "count"]).sort_index()
    seeds = int(stats["count"].max())
    ax.plot(stats.index, stats["mean"], color=color, lw=1.6, ls=ls, label=label,
            marker="o" if len(stats) <= 16 else None, ms=3)
    if seeds > 1:
        spread = stats["std"].fillna(0.0)
        ax.fill_between(stats.index, (stats["mean"] - spread).clip(0, 100), (stats["mean"] + spread).clip(0, 100),
                        color=color, alpha=0.18, lw=0)
    return seeds


def draw_curves(ax: Axes, frame: pd.DataFrame, column: str, key: str, colors: dict[str, object],
                x: str = "width") -> None:
    """One line per value of `key` (first-seen order): the mean of `column` over seeds at each `x` (width,
    length or step), with a ± one standard deviation band where several seeds are present (`draw_mean`)."""
    for name in dict.fromkeys(frame[key]):
        mine = frame[frame[key] == name]
        seeds = int(mine.dropna(subset=[column]).groupby(x)[column].count().max()) if mine[column].notna().any() else 0
        draw_mean(ax, mine, column, colors[name], name if seeds <= 1 else f"{name} ({seeds} seeds)", x)


def seed_count(seeds: pd.Series) -> str:
    """How many seeds the lines have: "1 seed", "3 seeds" or "1–3 seeds"."""
    lo, hi = int(seeds.min()), int(seeds.max())
    return f"{lo} seed" if lo == hi == 1 else f"{hi} seeds" if lo == hi else f"{lo}–{hi} seeds"


def palette(names: Sequence[str]) -> dict[str, object]:
    """A colour per name: the eight distinct colours of `grid.DISTINCT` for up to eight names, tab20 beyond
    (figures of more names draw one panel per name instead)."""
    if len(names) <= len(DISTINCT):
        return dict(zip(names, DISTINCT))
    import seaborn as sns

    return dict(zip(names, sns.color_palette("tab20", len(names))))


def read_progress(path: Path) -> pd.DataFrame:
    """progress.csv (every evaluation of every run of a table); ValueError naming the file when malformed."""
    return read_table(path, numbers=("seed", "step", "train_width", "widths", "val_acc"), texts=("row",),
                      optional=tuple(f"tf@{n}" for n in range(1, 257)), made_by=MADE_BY)


# A run's line style by its seed (seed 0 solid, 1 dashed, 2 dotted; seeds past the last share its style); a run
# that did not reach its last step ends in ×.
SEED_STYLES = ("-", "--", ":", "-.")


def seed_style(seed: int) -> str:
    """The line style of a run of this seed: the same seed looks the same in every panel and figure."""
    return SEED_STYLES[min(int(seed), len(SEED_STYLES) - 1)]


def seed_styles(seeds: Sequence[int]) -> list[tuple[str, str]]:
    """(line style, legend label) for the seeds drawn, by seed; seeds past the last style share one entry."""
    last = len(SEED_STYLES) - 1
    below = sorted({int(s) for s in seeds if int(s) < last})
    above = sorted({int(s) for s in seeds if int(s) >= last})
    shared = [] if not above else [(SEED_STYLES[last], f"seed {above[0]}" if len(above) == 1
                                    else f"seeds {above[0]}–{above[-1]}")]
    return [(SEED_STYLES[s], f"seed {s}") for s in below] + shared


def draw_runs(ax: Axes, frame: pd.DataFrame, column: str, colors: dict[str, object]) -> None:
    """One line per run of progress.csv: a colour per row, a line style per seed, × at the last evaluation
    of a run not finished. Runs, not a mean over seeds: the seeds of a row are often at different steps
    (a campaign stopped part-way), and a mean over whichever seeds reached a step jumps where one ends."""
    for row in dict.fromkeys(frame["row"]):
        mine = frame[frame["row"] == row].dropna(subset=[column])
        seeds = sorted(mine["seed"].unique())
        for i, seed in enumerate(seeds):
            run = mine[mine["seed"] == seed].sort_values("step")
            label = (row if len(seeds) == 1 else f"{row} ({len(seeds)} seeds)") if i == 0 else None
            ax.plot(run["step"], run[column], color=colors[row], lw=1.4, ls=seed_style(seed), label=label)
            if "status" in run.columns and run["status"].iloc[-1] != "finished":
                ax.plot(run["step"].iloc[-1:], run[column].iloc[-1:], color=colors[row], marker="x", ls="none")


def plot_progress(frame: pd.DataFrame, source: Path, path: Path, command: str,
                  names: dict[str, str] | None = None) -> Path:
    """One panel per table row: the widths answered (left axis) and the validation accuracy (right axis)
    against the step, one line per run (`draw_runs`: seed 0 solid, 1 dashed, 2 dotted, whichever seeds a row has), with the widest
    training width of each step dashed grey: how fast each row takes in the widths, and whether it keeps
    pace with a curriculum. `frame` is `read_progress(source)`; `names` the rows' display names."""
    rows = list(dict.fromkeys(frame["row"]))
    names = names or {r: r for r in rows}
    widest = frame.groupby("step")["train_width"].max().sort_index()
    top = max(float(widest.max()), float(frame["widths"].max()), 1.0)
    with styled():
        fig = new_figure(8, 5)
        axes = panels(fig, len(rows), width=3.6, height=2.8)
        for ax, row in zip(axes, rows):
            mine = frame[frame["row"] == row]
            ax.plot(widest.index, widest.to_numpy(), color="0.45", lw=1.1, ls=(0, (4, 2)))
            draw_runs(ax, mine, "widths", {row: DISTINCT[0]})
            ax.set_ylim(-0.03 * top, 1.03 * top)
            right = ax.twinx()
            right.grid(False)
            draw_runs(right, mine, "val_acc", {row: DISTINCT[3]})
            right.set_ylim(-3, 103)
            # every panel reads its own accuracy off its own right axis (each has its scale's ticks); the
            # last panel of a row of panels names it
            right.tick_params(axis="y", labelright=True, labelcolor=DISTINCT[3], labelsize="small")
            if ax is axes[-1] or not (axes.index(ax) + 1) % grid_columns(len(rows)):
                right.set_ylabel("val. acc. (%)", color=DISTINCT[3])
            seeds = mine["seed"].nunique()
            ax.set_title(f"{two_lines(names.get(row, row))}\n{seeds} seed{'s' if seeds > 1 else ''}",
                         fontsize="small")
        outer_labels(axes, "training step", "widths answered")
        handles = [Line2D([], [], color=DISTINCT[0], lw=1.6, label="widths answered (whole answers ≥ 95%, from 1)"),
                   Line2D([], [], color=DISTINCT[3], lw=1.6, label="validation accuracy (%, right axis)"),
                   Line2D([], [], color="0.45", lw=1.1, ls=(0, (4, 2)), label="widest training width"),
                   *(Line2D([], [], color="0.2", lw=1.2, ls=ls, label=label)
                     for ls, label in seed_styles(frame["seed"].unique()))]
        if "status" in frame.columns and (frame["status"] != "finished").any():
            handles.append(Line2D([], [], color="0.2", marker="x", ls="none", label="run stopped early"))
        fig.legend(handles=handles, loc="outside lower center", ncols=legend_columns(fig, len(handles), 2.6),
                   fontsize="small")
        fig.suptitle(f"Addition while training: every evaluation of every run\n({shown(source)})",
                     fontsize="medium")
    return save_png(fig, path, shown(source), command)


def width_columns(frame: pd.DataFrame) -> dict[int, str]:
    """progress.csv's `tf@<n>` columns that hold a value, by width."""
    found = {int(c.split("@", 1)[1]): c for c in frame.columns
             if c.startswith("tf@") and c.split("@", 1)[1].isdigit() and frame[c].notna().any()}
    return dict(sorted(found.items()))


def step_edges(steps: Sequence[float]) -> list[float]:
    """Cell edges around evaluation steps: halfway between neighbours, the ends as far out as their neighbour."""
    steps = [float(s) for s in steps]
    if len(steps) == 1:
        return [steps[0] - 0.5, steps[0] + 0.5]
    mids = [(a + b) / 2 for a, b in zip(steps, steps[1:])]
    return [2 * steps[0] - mids[0], *mids, 2 * steps[-1] - mids[-1]]


def plot_heatmap(frame: pd.DataFrame, source: Path, path: Path, command: str, names: dict[str, str],
                 held_out: tuple[int, int]) -> Path:
    """heatmap.png: one panel per row, whole answers right (teacher-forced) by training step (x) and operand width
    (y), the median over the seeds that reached each step; the curriculum's widest training width as a white step
    line and the first held-out width marked: where a row stops taking in widths, and how far past the trained
    ones its answers reach. `frame` is `read_progress(source)` with its `tf@<n>` columns."""
    import numpy as np

    widths = width_columns(frame)
    cells = list(widths.values())
    rows = [r for r in dict.fromkeys(frame["row"]) if frame.loc[frame["row"] == r, cells].notna().any(axis=None)]
    ys = list(widths)
    y_edges = [ys[0] - 0.5, *[(a + b) / 2 for a, b in zip(ys, ys[1:])], ys[-1] + 0.5]
    with styled():
        fig = new_figure(8, 5)
        axes = panels(fig, len(rows), width=3.6, height=2.9)
        mesh = None
        for ax, row in zip(axes, rows):
            mine = frame[frame["row"] == row]
            grid = mine.groupby("step")[cells].median().sort_index()
            steps = list(grid.index)
            mesh = ax.pcolormesh(step_edges(steps), y_edges, np.ma.masked_invalid(grid.to_numpy(dtype=float).T),
                                 cmap="viridis", vmin=0, vmax=100, shading="flat")
            front = mine.groupby("step")["train_width"].max().sort_index()
            ax.step(front.index, front.to_numpy(), where="mid", color="white", lw=1.2, ls=(0, (4, 2)))
            if ys[0] <= held_out[0] <= ys[-1]:
                ax.axhline(held_out[0] - 0.5, color="white", lw=1.0, ls=":")
            ax.grid(False)
            seeds = mine["seed"].nunique()
            ax.set_title(f"{two_lines(names.get(row, row))}\n{seeds} seed{'s' if seeds > 1 else ''}"
                         f"{' (median)' if seeds > 1 else ''}", fontsize="small")
        outer_labels(axes, "training step", "operand width (digits)")
        fig.colorbar(mesh, ax=axes, label="whole answers right (%)", shrink=0.8)
        handles = [Line2D([], [], color="0.3", lw=1.2, ls=(0, (4, 2)), label="widest training width (white)"),
                   Line2D([], [], color="0.3", lw=1.0, ls=":", label=f"first held-out width, {held_out[0]} (white)")]
        fig.legend(handles=handles, loc="outside lower center", ncols=2, fontsize="small")
        fig.suptitle(f"Addition while training: whole answers by width and step\n({shown(source)})",
                     fontsize="medium")
    return save_png(fig, path, shown(source), command)


def plot_per_width(frame: pd.DataFrame, source: Path, path: Path, command: str, names: dict[str, str],
                   train: tuple[int, int] | None, held_out: tuple[int, int], key: str = "row") -> Path:
    """per_width.png: one panel per value of `key`, whole-answer accuracy solid and per-token dashed (each
    the mean over seeds with its ± one standard deviation band, clipped to 0–100), the trained widths shaded
    and the held-out ones marked."""
    widest = max(int(frame["width"].max()), held_out[1])
    columns = [(c, t) for c, t in PANELS if has_values(frame, c)]
    styles = {"teacher_forced": (DISTINCT[0], "-", "whole answer"), "per_token": (DISTINCT[1], "--", "per token")}
    rows = list(dict.fromkeys(frame[key]))
    seeds = frame.groupby(key)["seed"].nunique()
    with styled():
        fig = new_figure(8, 5)
        axes = panels(fig, len(rows))
        for ax, row in zip(axes, rows):
            shade_widths(ax, train, held_out, widest)
            for column, _ in columns:
                color, ls, what = styles[column]
                draw_mean(ax, frame[frame[key] == row], column, color, what, ls=ls)
            n = int(seeds[row])
            ax.set_title(f"{two_lines(names.get(row, row))}\n{n} seed{'s' if n > 1 else ''}", fontsize="small")
        outer_labels(axes, "operand width (digits)", "accuracy (%)")
        handles, labels = axes[0].get_legend_handles_labels()
        if any(seeds > 1):
            handles.append(Patch(color="0.6", alpha=0.4, lw=0))
            labels.append("± 1 std over seeds")
        if train is None:
            handles.append(Patch(color="white"))
            labels.append("trained widths: not recorded")
        fig.legend(handles, labels, loc="outside lower center", ncols=legend_columns(fig, len(labels)),
                   fontsize="small")
        fig.suptitle(f"Addition, teacher-forced, each run at its best step\n({shown(source)})", fontsize="medium")
    return save_png(fig, path, shown(source), command)


def plot_addition(table: str | Path, out: str | Path | None = None, train_widths: tuple[int, int] | None = None,
                  command: str = "lab plot addition") -> list[Path]:
    """Draw `<out>/per_width.png` from `<table>/per_width.csv` (out defaults to table), one panel per row;
    and `<out>/progress.png` from `<table>/progress.csv` when the table has one. The trained widths shaded
    are `train_widths`, else those the runs were given (`recorded_train_widths`), else none. Returns the
    files."""
    table = Path(table)
    out = Path(out) if out is not None else table
    source = table / "per_width.csv"
    frame = read_per_width(source)
    # read (and checked) before anything is drawn, so that a malformed file leaves no figure behind
    progress = read_progress(table / "progress.csv") if (table / "progress.csv").is_file() else None
    train = train_widths or recorded_train_widths(table, frame)
    held_out = marked_widths(frame, "held_out") or EXTRAPOLATION
    names = display_names(dict.fromkeys(frame["row"]), frame, table)
    files = [plot_per_width(frame, source, out / "per_width.png", command, names, train, held_out)]
    if progress is not None:
        progress_names = display_names(dict.fromkeys(progress["row"]), frame, table)
        files.append(plot_progress(progress, table / "progress.csv", out / "progress.png", command, progress_names))
        if width_columns(progress):  # progress.csv written before it held each width's accuracy has none
            files.append(plot_heatmap(progress, table / "progress.csv", out / "heatmap.png", command, progress_names,
                                      held_out))
    return files
