"""How far past the curriculum each row answers while it trains: the same-time table's rows beside the transformer
that extrapolates (`../packed-abacus-isolated/`: no RoPE, digit positions offset by 0-32, samples apart, 4000 steps
with the widths ramped over 3000).

At every evaluation, a run's reach is the widest width whose whole answers are right in at least half the samples
(teacher-forced); the row's reach is the median over its seeds, beside the curriculum's widest training width by then.
The same-time rows come from this folder's progress.csv (its `tf@<n>` columns); the transformer's from its runs'
evals.csv and its table's progress.csv (the widest training width).

    python records/addition/same-time/reach.py   # writes reach.csv, prints the table
"""

from pathlib import Path

import pandas as pd
from falcon_lab.compact import readable

HERE = Path(__file__).resolve().parent
TRANSFORMER = HERE.parent / "packed-abacus-isolated"
WIDTHS = range(1, 49)


def reach(accuracies: pd.Series) -> int:
    """The widest width answered whole in at least half the samples (0 for none)."""
    return max((n for n in WIDTHS if accuracies[f"tf@{n}"] >= 50), default=0)


def same_time_rows() -> pd.DataFrame:
    progress = pd.read_csv(HERE / "progress.csv")
    progress["reach"] = progress.apply(reach, axis=1)
    return progress[["row", "seed", "step", "train_width", "reach"]]


def transformer_rows() -> pd.DataFrame:
    front = pd.read_csv(TRANSFORMER / "progress.csv")[["run_id", "step", "train_width"]]
    runs = []
    for folder in sorted((TRANSFORMER / "runs").iterdir()):
        evals = pd.read_csv(readable(folder / "evals.csv"))
        runs.append(pd.DataFrame({"row": "transformer (NoPE, 4000 steps)", "run_id": folder.name,
                                  "step": evals["step"], "reach": evals.apply(reach, axis=1)}))
    frame = pd.concat(runs).merge(front, on=["run_id", "step"], how="left")
    seeds = {run: i for i, run in enumerate(dict.fromkeys(frame["run_id"]))}
    frame["seed"] = frame["run_id"].map(seeds)
    return frame[["row", "seed", "step", "train_width", "reach"]]


def main() -> None:
    runs = pd.concat([same_time_rows(), transformer_rows()])
    table = (runs.groupby(["row", "step"], sort=False)
             .agg(seeds=("seed", "nunique"), train_width=("train_width", "max"), reach=("reach", "median"))
             .reset_index())
    table["ahead"] = table["reach"] - table["train_width"]
    table.to_csv(HERE / "reach.csv", index=False)
    for row, mine in table.groupby("row", sort=False):
        shown = mine[mine["step"] % 400 == 0]
        print(f"{row} ({int(mine['seeds'].max())} seeds): " + "  ".join(
            f"{int(r.step)}: {r.reach:g} of {int(r.train_width)}" for r in shown.itertuples()))


if __name__ == "__main__":
    main()
