"""The second figure of this folder: calls 4-6 (steps, digit positions, the rule's chunk size). Left, whole-answer
accuracy on widths 1-32 against the step; right, accuracy per width at each run's last evaluation, with the
widest sample that fits in one chunk of the rule (a width-n sample is 3n + 4 tokens) marked for chunks of 64 and 32
(a suspect that calls 7-9 ruled out: walls.py).

    python records/addition/regime-2026-12-02/cliffs.py   # writes cliffs.png beside it
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from falcon_lab.compact import readable

HERE = Path(__file__).resolve().parent
RUNS = (("long/f1a3-long", "falcon-1a.3", "tab:blue", "-"),
        ("long/f13-long", "falcon-1.3", "tab:orange", "-"),
        ("abacus/f1a3-ab-long", "falcon-1a.3, digit positions", "tab:blue", "--"),
        ("abacus/f13-ab-long", "falcon-1.3, digit positions", "tab:orange", "--"),
        ("chunk/f13-c64", "falcon-1.3, chunks of 64 (rerun, 2400 steps)", "tab:red", ":"),
        ("chunk/f13-c32", "falcon-1.3, chunks of 32 (2400 steps)", "tab:green", "-"))


def fits(chunk: int) -> int:
    return (chunk - 4) // 3


fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.4), layout="constrained")
for run, label, colour, style in RUNS:
    evals = pd.read_csv(readable(HERE / run / "evals.csv"))
    left.plot(evals["step"], evals["val_acc"], color=colour, ls=style, marker="o", ms=2.5, label=label)
    last = evals.iloc[-1]
    widths = list(range(1, 33))
    right.plot(widths, [last[f"tf@{w}"] for w in widths], color=colour, ls=style, marker="o", ms=2.5)
left.set_xlabel("step")
left.set_ylabel("whole answers right, widths 1-32 (%)")
left.set_ylim(0, 100)
left.set_title("Compiled, CUDA graphs, lr 3e-3, 65k tokens a step, seed 0", fontsize=10)
fig.legend(*left.get_legend_handles_labels(), loc="outside lower center", ncol=3, fontsize=9)
for chunk, colour in ((64, "tab:red"), (32, "tab:green")):
    right.axvline(fits(chunk) + 0.5, color=colour, lw=1, alpha=0.6)
    right.text(fits(chunk) + 0.7, 45, f"widest sample in one\nchunk of {chunk} (width {fits(chunk)})",
               color=colour, fontsize=8, va="center")
right.set_xlabel("width n (digits of each operand)")
right.set_ylabel("whole answers right at the last evaluation (%)")
right.set_ylim(-2, 102)
right.set_xlim(0.5, 32.5)
right.set_title("Per width at each run's last evaluation", fontsize=10)
for ax in (left, right):
    ax.grid(alpha=0.3)
fig.suptitle("Addition, paper-size model on one H200: each run stops at a width of its own (5 to 19); calls 7-9 show "
             "the rule's chunk size is not the cause (walls.png)", fontsize=11)
fig.savefig(HERE / "cliffs.png", dpi=110)
