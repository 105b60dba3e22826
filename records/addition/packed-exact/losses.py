"""Training loss by step of every run in `runs/` (the packed-exact table), one panel per row, with the widest
width the curriculum trains at each step: whether a row that stops at widths 2–6 (`progress.png`) stops learning, or
falls behind as the widths grow.

    python records/addition/packed-exact/losses.py   # writes losses.png beside it
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
import yaml
from falcon_lab.compact import readable

HERE = Path(__file__).resolve().parent
ORDER = ("falcon-1.3", "falcon-1a.3", "falcon-1a.2", "falcon-3a.3", "mamba2", "falcon-1a.1", "deltanet", "retnet",
         "transformer", "gated-deltanet", "falcon-2", "falcon-3", "falcon-2a")
DASHES = {0: "-", 1: "--", 2: ":"}

runs: dict[str, list[tuple[int, pd.DataFrame]]] = {}
for folder in sorted((HERE / "runs").iterdir()):
    cfg = yaml.safe_load((folder / "config.yaml").read_text())
    metrics = pd.read_csv(readable(folder / "metrics.csv")).dropna(subset=["loss"])
    runs.setdefault(cfg["mixer"], []).append((cfg["train"]["seed"], metrics))
    ramp, steps = cfg["data"]["ramp_steps"], cfg["train"]["max_steps"]
rows = [r for r in ORDER if r in runs]
cols = 3
fig, axes = plt.subplots(-(-len(rows) // cols), cols, figsize=(4.2 * cols, 2.9 * -(-len(rows) // cols)),
                         sharex=True, sharey=True, constrained_layout=True, squeeze=False)
for ax in axes.flat[len(rows):]:
    ax.set_visible(False)
for ax, row in zip(axes.flat, rows):
    for seed, m in sorted(runs[row], key=lambda r: r[0]):
        smooth = m["loss"].rolling(10, min_periods=1).mean()
        ax.plot(m["step"], smooth, color="C0", ls=DASHES.get(seed, "-."), lw=1.3, label=f"seed {seed}")
    ax.set_yscale("log")
    ax.set_ylim(1e-4, 3)
    ax.set_title(f"{row} ({len(runs[row])} seed{'s' if len(runs[row]) > 1 else ''})", fontsize=10)
    ax.grid(alpha=0.3)
    width = ax.twinx()
    width.plot([0, ramp, steps], [1, 32, 32], color="0.55", lw=1, ls=(0, (4, 2)))
    width.set_ylim(0, 34)
    width.tick_params(labelsize=8, colors="0.45")
    ax.legend(fontsize=7, loc="lower left")
for ax in axes[-1]:
    ax.set_xlabel("training step")
for ax in axes[:, 0]:
    ax.set_ylabel("training loss (log)")
fig.suptitle("packed-exact: training loss by step (mean of 10 logged steps); grey dashes: widest trained width "
             "(right axis, 1 → 32)", fontsize=11)
fig.savefig(HERE / "losses.png", dpi=120)
