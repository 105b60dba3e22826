"""Where past width 32 the answers break, digit by digit: each row's accuracy at every answer position for the
widths 33-48, at the run's best step (teacher-forced, the runs' positions.csv, 50 samples a width).

The table's runs are found by id (progress.csv) among this folder's runs and those it takes from
`../falcon-same-time/` and `../isolated-offsets/`. A row's value at (width, position) is the median over its seeds.
Answer position 0 is the sum's lowest digit (the answer is written reversed); position n the carry digit of
width n. Writes digits.csv (row, seeds, width, position, accuracy), digits.png, and prints per row the first
answer position under 90% at widths 36, 40, 44 and 48 and the mean per-digit accuracy of positions 4-31 and 32-48.

    python records/addition/same-time/digits.py
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

HERE = Path(__file__).resolve().parent
SOURCES = [HERE / "runs", HERE.parent / "falcon-same-time" / "runs", HERE.parent / "isolated-offsets" / "runs"]
WIDTHS = range(33, 49)
ORDER = ["transformer", "retnet", "mamba2", "deltanet", "gated-deltanet", "falcon-1.3", "falcon-1a.1",
         "falcon-1a.2", "falcon-1a.3", "falcon-3", "falcon-3a.3", "falcon-2", "falcon-2a"]


def folders_by_id() -> dict[str, Path]:
    found = {}
    for source in SOURCES:
        for folder in sorted(source.iterdir()):
            if (folder / "run.json").exists():
                found[json.loads((folder / "run.json").read_text())["id"]] = folder
    return found


def digit_table() -> pd.DataFrame:
    progress = pd.read_csv(HERE / "progress.csv")
    runs = progress[progress["status"] == "finished"].drop_duplicates("run_id")[["row", "seed", "run_id"]]
    where = folders_by_id()
    parts = []
    for run in runs.itertuples():
        pos = pd.read_csv(where[run.run_id] / "positions.csv.gz")
        pos = pos[(pos["which"] == "best") & (pos["token"] == "digit") & pos["width"].isin(WIDTHS)]
        parts.append(pos.assign(row=run.row, seed=run.seed)[["row", "seed", "width", "position", "accuracy"]])
    every = pd.concat(parts)
    return (every.groupby(["row", "width", "position"])
            .agg(seeds=("seed", "nunique"), accuracy=("accuracy", "median")).reset_index())


def draw(table: pd.DataFrame, out: Path) -> None:
    rows = [r for r in ORDER if r in set(table["row"])]
    cols = 4
    fig, axes = plt.subplots((len(rows) + cols - 1) // cols, cols, figsize=(16, 3.2 * ((len(rows) + cols - 1) // cols)),
                             sharex=True, sharey=True, constrained_layout=True)
    for ax in axes.flat[len(rows):]:
        ax.axis("off")
    for ax, row in zip(axes.flat, rows):
        mine = table[table["row"] == row]
        grid = np.full((len(WIDTHS), 49), np.nan)
        for r in mine.itertuples():
            grid[r.width - WIDTHS.start, r.position] = r.accuracy
        image = ax.imshow(grid, origin="lower", aspect="auto", cmap="viridis", vmin=0, vmax=100,
                          extent=(-0.5, 48.5, WIDTHS.start - 0.5, WIDTHS.stop - 0.5))
        ax.axvline(31.5, color="white", linestyle=":", linewidth=1)
        ax.set_title(f"{row} ({int(mine['seeds'].max())} seed{'s' if mine['seeds'].max() > 1 else ''})", fontsize=10)
    for ax in axes[-1]:
        ax.set_xlabel("answer position (0 = lowest digit)")
    for ax in axes[:, 0]:
        ax.set_ylabel("operand width")
    fig.colorbar(image, ax=axes, shrink=0.6, label="digit right (%), median over seeds")
    fig.suptitle("Past width 32, digit by digit: each answer position at the best step (teacher-forced; "
                 "dotted: position 32)", fontsize=12)
    fig.savefig(out, dpi=110)


def main() -> None:
    table = digit_table()
    table.to_csv(HERE / "digits.csv", index=False)
    draw(table, HERE / "digits.png")
    for row in [r for r in ORDER if r in set(table["row"])]:
        mine = table[table["row"] == row]
        first = []
        for width in (36, 40, 44, 48):
            low = mine[(mine["width"] == width) & (mine["accuracy"] < 90)]["position"]
            first.append(f"{width}: {int(low.min()) if len(low) else '-'}")
        middle = mine[mine["position"].between(4, 31)]["accuracy"].mean()
        high = mine[mine["position"] >= 32]["accuracy"].mean()
        print(f"{row:15s} seeds {int(mine['seeds'].max())}  first position < 90%  {'  '.join(first)}  "
              f"mean of positions 4-31 {middle:.1f}, 32-48 {high:.1f}")


if __name__ == "__main__":
    main()
