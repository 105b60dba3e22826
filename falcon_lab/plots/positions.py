"""`lab plot positions`: teacher-forced accuracy of every target position of every width, as a heat map.

From positions.csv (`lab eval addition --positions`): width on the y axis, the position of the sum's digit
on the x axis (0 = least significant, n = the carry digit), one cell per (width, position), and the EOS
token of each width in a narrow panel beside. Dashed lines mark the widest trained width and the last
digit position it trains: a model that has learned the algorithm stays bright past both; one that has
learned positions goes dark to the right of the vertical line, one that has learned widths goes dark
above the horizontal one.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

from falcon_lab.plots.figure import new_figure, save_png, shown, styled
from falcon_lab.plots.tables import read_table

MADE_BY = "lab eval addition --run RUN --positions FILE.csv"


def read_positions(path: Path) -> pd.DataFrame:
    """positions.csv; ValueError naming the file when it is malformed or a position lies outside its width."""
    frame = read_table(path, numbers=("width", "position", "accuracy"), texts=("token",), made_by=MADE_BY)
    outside = frame[(frame["width"] < 1) | (frame["position"] < 0) | (frame["position"] > frame["width"] + 1)]
    if not outside.empty:
        row = outside.iloc[0]
        raise ValueError(f"{path}: position {row['position']:g} does not lie in a width-{row['width']:g} "
                         f"answer (positions 0 to width + 1)")
    return frame


def digit_ends(frame: pd.DataFrame, threshold: float = 90.0) -> pd.DataFrame:
    """Per width (and per `which`, where positions.csv has it): how many of the answer's digits are right
    (accuracy >= `threshold`) counting from the least significant end before the first wrong one (`low`),
    and from the most significant end, the carry digit included (`high`); `digits` = width + 1, and
    low = high = digits when none is wrong. A model that aligns operand digits only near the answer and
    near the sample's start keeps low and high fixed over widths and answers up to width low + high - 1."""
    keys = [k for k in ("run", "which", "step") if k in frame.columns]
    rows = []
    digits = frame[frame["token"] == "digit"]
    for key, group in digits.groupby([*keys, "width"], sort=True):
        right = (group.sort_values("position")["accuracy"] >= threshold).tolist()
        low = right.index(False) if False in right else len(right)
        high = right[::-1].index(False) if False in right else len(right)
        rows.append({**dict(zip([*keys, "width"], key if isinstance(key, tuple) else (key,))),
                     "digits": len(right), "low": low, "high": high})
    return pd.DataFrame(rows, columns=[*keys, "width", "digits", "low", "high"])


def run_train_widths(csv: Path) -> tuple[int, int] | None:
    """The widths the run behind a positions.csv trained on: data.widths of the config.yaml beside it (a
    run's own positions.csv lies in its run folder); None when there is none."""
    config = csv.parent / "config.yaml"
    if not config.is_file():
        return None
    widths = ((yaml.safe_load(config.read_text(encoding="utf-8")) or {}).get("data") or {}).get("widths")
    return (int(widths[0]), int(widths[1])) if isinstance(widths, list) and len(widths) == 2 else None


def plot_positions(csv: str | Path, out: str | Path | None = None, train_widths: tuple[int, int] | None = None,
                   command: str = "lab plot positions") -> list[Path]:
    """`<csv stem>.png` beside `csv` (or in `out`); returns the files written. Of a CSV holding several
    weights of a run (a run's own positions.csv: `which` best and last), the best are drawn. The trained
    widths marked are `train_widths`, else the run's (`run_train_widths`); ValueError when neither says."""
    csv = Path(csv)
    frame = read_positions(csv)
    train_widths = train_widths or run_train_widths(csv)
    if train_widths is None:
        raise ValueError(f"{csv}: no config.yaml of its run beside it to read the trained widths from; "
                         f"give them with --train-widths LO-HI")
    if "which" in frame.columns and (frame["which"] == "best").any():
        frame = frame[frame["which"] == "best"]  # a run's positions.csv holds its best and its last weights
    widest = int(frame["width"].max())
    digits = frame[frame["token"] == "digit"]
    eos = frame[frame["token"] == "eos"].set_index("width")["accuracy"]
    grid = np.full((widest, widest + 1), np.nan)
    for row in digits.itertuples():
        grid[int(row.width) - 1, int(row.position)] = row.accuracy
    hi = train_widths[1]
    title = shown(csv)
    if "run" in frame.columns and "step" in frame.columns:
        title = f"{frame['run'].iloc[0]}, step {frame['step'].iloc[0]} ({shown(csv)})"
    with styled():
        fig = new_figure(9, 7)
        main, side = fig.subplots(1, 2, width_ratios=[widest + 1, 3], sharey=True)
        image = main.imshow(grid, origin="lower", aspect="auto", cmap="viridis", vmin=0, vmax=100,
                            extent=(-0.5, widest + 0.5, 0.5, widest + 0.5), interpolation="nearest")
        side.imshow(np.array([[eos.get(n, np.nan)] for n in range(1, widest + 1)]), origin="lower", aspect="auto",
                    cmap="viridis", vmin=0, vmax=100, extent=(-0.5, 0.5, 0.5, widest + 0.5), interpolation="nearest")
        for ax in (main, side):
            ax.grid(False)
            ax.axhline(hi + 0.5, color="white", lw=1.2, ls="--")
        main.axvline(hi + 0.5, color="white", lw=1.2, ls="--")
        main.set_xlabel("position in the answer (0 = least significant digit; n = the carry digit)")
        main.set_ylabel("operand width n")
        main.set_title(f"Teacher-forced accuracy of each answer digit (dashed: trained widths ≤ {hi})",
                       fontsize="medium")
        side.set_xticks([0], ["EOS"])
        side.set_title("end", fontsize="medium")
        fig.colorbar(image, ax=[main, side], label="accuracy (%)", shrink=0.8)
        fig.suptitle(title, fontsize="small")
    folder = Path(out) if out is not None else csv.parent
    return [save_png(fig, folder / f"{csv.stem}.png", shown(csv), command)]


def digit_grid(frame: pd.DataFrame) -> np.ndarray:
    """The (width, position) accuracies of the answer digits of one set of weights as an array: row n − 1 is
    width n, column p position p; NaN where a width has no such position."""
    digits = frame[frame["token"] == "digit"]
    widest = int(frame["width"].max())
    grid = np.full((widest, widest + 1), np.nan)
    for row in digits.itertuples():
        grid[int(row.width) - 1, int(row.position)] = row.accuracy
    return grid


def plot_positions_grid(csvs: Sequence[Path], out: str | Path, labels: Sequence[str], title: str,
                        command: str = "lab report all") -> list[Path]:
    """One figure of the heat maps of several runs (each at its best weights), one panel per run titled by
    `labels`, the trained widths of each run dashed (read from its config.yaml); written to `out`
    (a .png path). ValueError when a run's trained widths cannot be read."""
    from falcon_lab.plots.grid import grid_columns, panels

    if len(csvs) != len(labels) or not csvs:
        raise ValueError(f"plot_positions_grid: {len(csvs)} positions.csv files and {len(labels)} labels")
    grids, tops = [], []
    for csv in csvs:
        frame = read_positions(Path(csv))
        widths = run_train_widths(Path(csv))
        if widths is None:
            raise ValueError(f"{csv}: no config.yaml of its run beside it to read the trained widths from")
        if "which" in frame.columns and (frame["which"] == "best").any():
            frame = frame[frame["which"] == "best"]
        grids.append(digit_grid(frame))
        tops.append(widths[1])
    columns = 6
    with styled():
        fig = new_figure(10, 8)
        axes = panels(fig, len(csvs), width=2.5, height=2.5, columns=columns)
        for ax, grid, hi, label in zip(axes, grids, tops, labels):
            widest = grid.shape[0]
            image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis", vmin=0, vmax=100,
                              extent=(-0.5, widest + 0.5, 0.5, widest + 0.5), interpolation="nearest")
            ax.grid(False)
            ax.axhline(hi + 0.5, color="white", lw=1, ls="--")
            ax.axvline(hi + 0.5, color="white", lw=1, ls="--")
            ax.set_title(label, fontsize="small")
        cols = grid_columns(len(axes), columns)
        for i, ax in enumerate(axes):
            ax.set_xlabel("answer digit (0 = units)" if i + cols >= len(axes) else "")
            ax.set_ylabel("operand width" if i % cols == 0 else "")
        fig.colorbar(image, ax=axes, label="teacher-forced accuracy (%)", shrink=0.6, pad=0.01)
        fig.suptitle(title, fontsize="medium")
    return [save_png(fig, Path(out), ", ".join(shown(Path(c)) for c in csvs[:2]) + (", …" if len(csvs) > 2 else ""),
                     command)]
