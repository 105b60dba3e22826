"""The figure of this folder: whole-answer accuracy on widths 1–32 against the step, every run of the three calls.

    python records/addition/regime-2026-12-02/progress.py   # writes progress.png beside it
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd

from falcon_lab.compact import readable

HERE = Path(__file__).resolve().parent
CALLS = (("screen", "Call 1: isolated samples, digit positions (65k tokens a step)"),
         ("tokens", "Call 2: 262k tokens a step, lr 3e-3"),
         ("lr", "Call 3: falcon-1.3's learning rate (65k tokens a step)"))
LABELS = {"f13-ab-3e3": "falcon-1.3, digit positions, lr 3e-3", "f13-iso-ab-1e3": "falcon-1.3, isolated, dig. pos., lr 1e-3",
          "f13-iso-ab-3e3": "falcon-1.3, isolated, dig. pos., lr 3e-3", "f1a3-b1024-3e3": "falcon-1a.3",
          "f13-b1024-3e3": "falcon-1.3", "f13-ab-b1024-3e3": "falcon-1.3, digit positions",
          "f13-lr1e-3": "lr 1e-3", "f13-lr3e-3": "lr 3e-3", "f13-lr1e-2": "lr 1e-2"}

fig, axes = plt.subplots(1, 3, figsize=(15, 4.2), sharey=True, constrained_layout=True)
for ax, (folder, title) in zip(axes, CALLS):
    for run, label in LABELS.items():
        path = readable(HERE / folder / run / "evals.csv")
        if path.exists():
            evals = pd.read_csv(path)
            ax.plot(evals["step"], evals["val_acc"], marker="o", ms=3, label=label)
    ax.set_title(title, fontsize=10)
    ax.set_xlabel("step")
    ax.set_ylim(0, 100)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="upper left")
axes[0].set_ylabel("whole answers right, widths 1–32 (%)")
fig.suptitle("Addition at the paper-size model, one H200, seed 0: no run passes 57% of widths 1–32 "
             "before its call's time limit", fontsize=11)
fig.savefig(HERE / "progress.png", dpi=110)
