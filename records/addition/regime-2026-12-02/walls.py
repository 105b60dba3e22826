"""The third figure of this folder: calls 7-9 (is the wall at width 8 with chunks of 32 the fused kernels', the
CUDA graphs', or a seed's?). falcon-1.3 at chunks of 32, 2400-step budget stopped by the call's time: the fused
kernels fed the projections' bf16 (as every earlier run) or float32 (`rule_dtype=float32`), and the PyTorch
chunk form, seeds 0-2, compiled without CUDA graphs; beside them call 6's graphed run (seed 0). Left, whole
answers on widths 1-32 against the step; right, per width at each run's last evaluation.

    python records/addition/regime-2026-12-02/walls.py   # writes walls.png beside it
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from falcon_lab.compact import readable

HERE = Path(__file__).resolve().parent
FEEDS = {"bf16": ("tab:orange", "fused kernels, bf16 inputs"), "fp32": ("tab:blue", "fused kernels, fp32 inputs"),
         "torch": ("tab:green", "PyTorch chunk form (fp32)"), "graph": ("0.3", "bf16 inputs, CUDA graphs (call 6)")}
STYLES = {0: "-", 1: "--", 2: ":"}
RUNS = [("chunk/f13-c32", "graph", 0)] + [
    (f"precision/f13-c32-{feed}{'' if seed == 0 else f'-s{seed}'}", feed, seed)
    for feed in ("bf16", "fp32") for seed in (0, 1, 2)] + [("precision/f13-c32-torch", "torch", 0)]

fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.6), layout="constrained")
for run, feed, seed in RUNS:
    evals = pd.read_csv(readable(HERE / run / "evals.csv"))
    colour, what = FEEDS[feed]
    label = f"{what}, seed {seed}"
    left.plot(evals["step"], evals["val_acc"], color=colour, ls=STYLES[seed], marker="o", ms=2.5, label=label)
    last = evals.iloc[-1]
    widths = list(range(1, 33))
    right.plot(widths, [last[f"tf@{w}"] for w in widths], color=colour, ls=STYLES[seed], marker="o", ms=2.5)
left.set_xlabel("step")
left.set_ylabel("whole answers right, widths 1-32 (%)")
left.set_ylim(0, 100)
left.set_title("falcon-1.3, chunks of 32, lr 3e-3, 65k tokens a step, ramp to width 32 over 1000 steps",
               fontsize=10)
right.axvline(9.5, color="0.5", lw=1, alpha=0.6)
right.text(9.8, 50, "widest sample in one\nchunk of 32 (width 9)", color="0.4", fontsize=8, va="center")
right.set_xlabel("width n (digits of each operand)")
right.set_ylabel("whole answers right at the last evaluation (%)")
right.set_ylim(-2, 102)
right.set_xlim(0.5, 32.5)
right.set_title("Per width at each run's last evaluation", fontsize=10)
for ax in (left, right):
    ax.grid(alpha=0.3)
fig.legend(*left.get_legend_handles_labels(), loc="outside lower center", ncol=3, fontsize=9)
fig.suptitle("Chunks of 32: 4 of 8 runs stall at widths 7-9 (the exact PyTorch form too), the others pass to "
             "widths 15-21 (an fp32-fed seed too): not a fused-kernel or CUDA-graph defect", fontsize=11)
fig.savefig(HERE / "walls.png", dpi=110)
