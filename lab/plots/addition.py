"""`lab plot addition`: accuracy against operand width, one line per table row, from per_width.csv;
and, where the table has progress.csv, the widths answered and the validation accuracy against the step.

In per_width.png each run is taken at its best step (the `which == "best"` rows); a line is the mean
over a row's seeds, with a band of ± one standard deviation when it has several (clipped to 0–100), named
as the table names the row (the `model` column). progress.png draws every run as its own line. The trained
widths are shaded and the held-out ones marked, as per_width.csv's `trained` and `held_out` columns say
(without them: the paper's 1–32 trained, 33–48 held out).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import pandas as pd
from matplotlib.axes import Axes

from lab.plots.figure import new_figure, save_png, styled
from lab.plots.tables import read_table

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


def shade_widths(ax: Axes, train: tuple[int, int], held_out: tuple[int, int] = EXTRAPOLATION,
                 widest: int = WIDEST) -> None:
    """Shade the trained widths and mark the held-out ones (the paper's 33–48) as extrapolation, on an axis
    of widths 1 to `widest`."""
    lo, hi = train
    ax.axvspan(lo - 0.5, hi + 0.5, color="tab:green", alpha=0.08, lw=0, label=f"trained widths {span(lo, hi)}")
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


def draw_curves(ax: Axes, frame: pd.DataFrame, column: str, key: str, colors: dict[str, object],
                x: str = "width") -> None:
    """One line per value of `key` (first-seen order): the mean of `column` over seeds at each `x`
    (width or step), with a ± one standard deviation band where several seeds are present."""
    for name in dict.fromkeys(frame[key]):
        mine = frame[frame[key] == name].dropna(subset=[column])
        if mine.empty:
            continue
        stats = mine.groupby(x)[column].agg(["mean", "std", "count"]).sort_index()
        color = colors[name]
        seeds = int(stats["count"].max())
        label = name if seeds == 1 else f"{name} ({seeds} seeds)"
        ax.plot(stats.index, stats["mean"], color=color, lw=1.5, label=label, marker="o" if len(stats) <= 16 else None,
                ms=3)
        if seeds > 1:  # accuracies: the band stays within 0–100
            spread = stats["std"].fillna(0.0)
            ax.fill_between(stats.index, (stats["mean"] - spread).clip(0, 100), (stats["mean"] + spread).clip(0, 100),
                            color=color, alpha=0.2, lw=0)


def seed_count(seeds: pd.Series) -> str:
    """How many seeds the lines have: "1 seed", "3 seeds" or "1–3 seeds"."""
    lo, hi = int(seeds.min()), int(seeds.max())
    return f"{lo} seed" if lo == hi == 1 else f"{hi} seeds" if lo == hi else f"{lo}–{hi} seeds"


def palette(names: Sequence[str]) -> dict[str, object]:
    """A colour per name, distinct for up to 20 names."""
    import seaborn as sns

    colors = sns.color_palette("tab10" if len(names) <= 10 else "tab20", len(names))
    return dict(zip(names, colors))


# progress.png's panels: (column of progress.csv, panel title, y label).
PROGRESS_PANELS = (("widths", "Widths answered (whole answers ≥ 95%, from width 1)", "widths"),
                   ("val_acc", "Validation accuracy (whole answers)", "accuracy (%)"))


def read_progress(path: Path) -> pd.DataFrame:
    """progress.csv (every evaluation of every run of a table); ValueError naming the file when malformed."""
    return read_table(path, numbers=("seed", "step", "train_width", "widths", "val_acc"), texts=("row",),
                      made_by=MADE_BY)


# A run's line style by seed (seeds past the last reuse it); a run that did not reach its last step ends in ×.
SEED_STYLES = ("-", "--", ":", "-.")


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
            ax.plot(run["step"], run[column], color=colors[row], lw=1.4, ls=SEED_STYLES[min(i, len(SEED_STYLES) - 1)],
                    label=label)
            if "status" in run.columns and run["status"].iloc[-1] != "finished":
                ax.plot(run["step"].iloc[-1:], run[column].iloc[-1:], color=colors[row], marker="x", ls="none")


def plot_progress(frame: pd.DataFrame, source: Path, path: Path, command: str) -> Path:
    """Widths answered and validation accuracy against the step, one line per run (`draw_runs`), with the
    widest training width of each step as a dashed line: how fast each row takes in the widths, and
    whether it keeps pace with a curriculum. `frame` is `read_progress(source)`."""
    rows = list(dict.fromkeys(frame["row"]))
    colors = palette(rows)
    with styled():
        fig = new_figure(6.5 * len(PROGRESS_PANELS) + 2.5, 5)
        axes = fig.subplots(1, len(PROGRESS_PANELS), squeeze=False)[0]
        for ax, (column, title, ylabel) in zip(axes, PROGRESS_PANELS):
            if column == "widths":
                widest = frame.groupby("step")["train_width"].max().sort_index()
                ax.plot(widest.index, widest.to_numpy(), color="0.3", lw=1.2, ls="--",
                        label="widest training width")
            draw_runs(ax, frame, column, colors)
            ax.set_title(title)
            ax.set_xlabel("training step")
            ax.set_ylabel(ylabel)
            if column == "val_acc":
                ax.set_ylim(-3, 103)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right upper", fontsize="small")
        fig.suptitle(f"Addition while training: {len(rows)} rows, every evaluation ({source.as_posix()})\n"
                     "one line per run: seed 0 solid, 1 dashed, 2 dotted; × a run stopped early", fontsize="medium")
    return save_png(fig, path, source.as_posix(), command)


def plot_addition(table: str | Path, out: str | Path | None = None, train_widths: tuple[int, int] | None = None,
                  command: str = "lab plot addition") -> list[Path]:
    """Draw `<out>/per_width.png` from `<table>/per_width.csv` (out defaults to table): accuracy against
    width, a whole-answer panel and a per-token one when the CSV has per-token accuracy; and
    `<out>/progress.png` from `<table>/progress.csv` when the table has one. The trained widths shaded are
    `train_widths`, else the CSV's (its `trained` column), else 1–32. Returns the files."""
    table = Path(table)
    out = Path(out) if out is not None else table
    source = table / "per_width.csv"
    frame = read_per_width(source)
    # read (and checked) before anything is drawn, so that a malformed file leaves no figure behind
    progress = read_progress(table / "progress.csv") if (table / "progress.csv").is_file() else None
    train = train_widths or marked_widths(frame, "trained") or (1, 32)
    held_out = marked_widths(frame, "held_out") or EXTRAPOLATION
    widest = max(int(frame["width"].max()), held_out[1])
    panels = [(c, t) for c, t in PANELS if has_values(frame, c)]
    key = "model" if "model" in frame.columns and frame["model"].ne("").all() else "row"
    colors = palette(list(dict.fromkeys(frame[key])))
    seeds = frame.groupby(key)["seed"].nunique()
    with styled():
        fig = new_figure(6.5 * len(panels) + 3.5, 5)
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, (column, title) in zip(axes, panels):
            shade_widths(ax, train, held_out, widest)
            draw_curves(ax, frame, column, key, colors)
            ax.set_title(title)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right upper", fontsize="small")
        fig.suptitle(f"Addition at each run's best step: {len(seeds)} rows, {seed_count(seeds)} each "
                     f"({source.as_posix()})", fontsize="medium")
    files = [save_png(fig, out / "per_width.png", source.as_posix(), command)]
    if progress is not None:
        files.append(plot_progress(progress, table / "progress.csv", out / "progress.png", command))
    return files
