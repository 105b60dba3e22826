"""The figure of calls 20-22: falcon-1.3 (and one falcon-1a.3 run) in the packed preset's schedule (6 x 384,
2000 steps, ramp over 1500, lr 1e-3, 65k tokens a step) with exact digit positions (`abacus0/`,
`model.abacus=0`), with positions shifted by a random offset per row (`offsets/`, `model.abacus=8` and 16),
and, in grey, the same schedule without digit positions (`../packed/`, falcon-1.3 seeds 0-2).
Left: whole answers right over widths 1-32 by step; right: each run's best step, per width 1-40.

    python records/addition/regime-2026-12-03/positions.py   # writes positions.png beside it
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from falcon_lab.compact import readable

HERE = Path(__file__).resolve().parent
PACKED = HERE.parent / "packed" / "runs"
NONE = ("96480f8cc8", "1e5e9ccc4b", "882548a496")  # falcon-1.3 in ../packed, seeds 0-2
RUNS = [("falcon-1.3, exact positions, seed 0", "abacus0/runs/f13-ab0-s0", "C0", "-"),
        ("falcon-1.3, exact positions, seed 1", "abacus0/runs/f13-ab0-s1", "C0", "--"),
        ("falcon-1.3, exact positions, seed 2", "abacus0/runs/f13-ab0-s2", "C0", ":"),
        ("falcon-1a.3, exact positions, seed 0", "abacus0/runs/f1a3-ab0-s0", "C2", "-"),
        ("falcon-1.3, offset 0-8, seed 0", "offsets/runs/f13-ab8-s0", "C1", "-"),
        ("falcon-1.3, offset 0-16, seed 0", "offsets/runs/f13-ab16-s0", "C3", "-"),
        ("falcon-1.3, offset 0-16, seed 1", "offsets/runs/f13-ab16-s1", "C3", "--")]
WIDTHS = range(1, 41)

fig, (left, right) = plt.subplots(1, 2, figsize=(13, 5), constrained_layout=True)
for i, run in enumerate(NONE):
    ev = pd.read_csv(readable(PACKED / run / "evals.csv"))
    best = ev.loc[ev["val_acc"].idxmax()]
    style = dict(color="0.6", lw=1.2, label="falcon-1.3, no digit positions, seeds 0-2" if i == 0 else None)
    left.plot(ev["step"], ev["val_acc"], marker="o", ms=2, **style)
    right.plot(WIDTHS, [best[f"tf@{w}"] for w in WIDTHS], **style)
for label, folder, colour, dash in RUNS:
    ev = pd.read_csv(readable(HERE / folder / "evals.csv"))
    best = ev.loc[ev["val_acc"].idxmax()]
    left.plot(ev["step"], ev["val_acc"], color=colour, ls=dash, lw=2, marker="o", ms=3, label=label)
    right.plot(WIDTHS, [best[f"tf@{w}"] for w in WIDTHS], color=colour, ls=dash, lw=2)
left.set(xlabel="step", ylabel="whole answers right, widths 1–32 (%)", ylim=(0, 101), xlim=(0, 2050),
         title="validation accuracy by step")
left.legend(fontsize=8, loc="upper left")
right.axvline(32.5, color="0.3", lw=1, ls="--")
right.text(33.2, 50, "untrained\nwidths", fontsize=9, color="0.3")
right.set(xlabel="operand width (digits)", ylabel="whole answers right at the best step (%)", ylim=(-2, 102),
          xlim=(1, 40), title="per width, best step by widths 1–32")
fig.suptitle("falcon-1.3 at 11.6M on one H200: exact digit positions fit widths 1–32, a random offset does not")
fig.savefig(HERE / "positions.png", dpi=130)
