"""The figure of call 12: falcon-1.3 at the paper's LM shape (12 x 768, 92M parameters) against the three seeds of
`addition-paper` (6 x 384, 11.6M) in the same schedule (`../packed/`: 2000 steps, ramp over 1500, lr 1e-3).

    python records/addition/regime-2026-12-02/size.py   # writes size.png beside it
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

HERE = Path(__file__).resolve().parent
PACKED = HERE.parent / "packed" / "runs"
SMALL = {"96480f8cc8": 0, "1e5e9ccc4b": 1, "882548a496": 2}  # falcon-1.3 in ../packed, seeds 0-2
WIDTHS = range(1, 33)


def answered(row: pd.Series) -> int:
    """The longest run of widths 1, 2, ... whose whole answers are right in >= 95% of samples."""
    n = 0
    for w in WIDTHS:
        if row[f"tf@{w}"] < 95:
            break
        n = w
    return n


def train_width(step: int, ramp: int = 1500) -> float:
    """The widest width the linear curriculum draws at a step (width 1 at step 0, 32 from `ramp` on)."""
    return min(32.0, 1 + 31 * step / ramp)


runs = [("falcon-1.3, 12 × 768 (92M), seed 0", pd.read_csv(HERE / "size" / "f13-768x12" / "evals.csv"), "C3", 2.2)]
runs += [(f"falcon-1.3, 6 × 384 (11.6M), seed {s}", pd.read_csv(PACKED / run / "evals.csv"), "C0", 1.0)
         for run, s in SMALL.items()]

fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.4), constrained_layout=True)
for i, (label, evals, colour, width) in enumerate(runs):
    style = dict(color=colour, lw=width, marker="o", ms=3, alpha=1.0 if i == 0 else 0.55,
                 label=label if i < 2 else None)
    left.plot(evals["step"], evals["val_acc"], **style)
    right.plot(evals["step"], evals.apply(answered, axis=1), **style)
steps = range(0, 2001, 50)
right.plot(steps, [train_width(s) for s in steps], color="0.4", ls="--", lw=1, label="widest width trained so far")
left.set_ylabel("whole answers right, widths 1–32 (%)")
left.set_ylim(0, 100)
right.set_ylabel("widths answered (1, 2, … at ≥ 95%)")
right.set_ylim(0, 33)
for ax in (left, right):
    ax.set_xlabel("step")
    ax.set_xlim(0, 2000)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
left.text(0.98, 0.03, "small model: seeds 0, 1, 2 (thin)", transform=left.transAxes, ha="right", fontsize=8)
fig.suptitle("Addition, packed curriculum, 65k tokens a step: eight times the parameters, 77.8% against 60–65% of "
             "widths 1–32 at step 1300 (one seed, stopped there); the widths answered in full: the same",
             fontsize=10)
fig.savefig(HERE / "size.png", dpi=110)
