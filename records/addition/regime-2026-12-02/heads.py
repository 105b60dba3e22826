"""The figure of calls 18-19: falcon-1.3 in the packed preset's schedule (2000 steps, ramp over 1500, lr 1e-3,
65k tokens a step) with the rule's key width per head changed (`heads/`: 12 heads of 32, 3 of 128, 2 of 256) and
with the model made deeper or wider (`shape/`: 12 x 384, 6 x 768), against the three seeds of the preset itself
(6 x 384, 6 heads of 64: `../packed/`) and the 92M model (12 x 768, seeds 0 and 1: `size-2000/`).

    python records/addition/regime-2026-12-02/heads.py   # writes heads.png beside it
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from falcon_lab.compact import readable

HERE = Path(__file__).resolve().parent
PACKED = HERE.parent / "packed" / "runs"
SMALL = ("96480f8cc8", "1e5e9ccc4b", "882548a496")  # falcon-1.3 in ../packed, seeds 0-2
WIDTHS = range(1, 33)


def answered(row: pd.Series) -> int:
    """The longest run of widths 1, 2, ... whose whole answers are right in >= 95% of samples."""
    n = 0
    for w in WIDTHS:
        if row[f"tf@{w}"] < 95:
            break
        n = w
    return n


def evals(folder: Path) -> pd.DataFrame:
    return pd.read_csv(readable(folder / "evals.csv"))


grey = [evals(PACKED / run) for run in SMALL]
big = [evals(HERE / "size-2000" / name) for name in ("f13-768x12", "f13-768x12-s1")]
runs = [("6 × 384, 12 heads of 32 (11.6M)", evals(HERE / "heads" / "runs" / "f13-h12x32"), "C1"),
        ("6 × 384, 3 heads of 128 (11.6M)", evals(HERE / "heads" / "runs" / "f13-h3x128"), "C2"),
        ("6 × 384, 2 heads of 256 (13.0M)", evals(HERE / "heads" / "runs" / "f13-h2x256"), "C4"),
        ("12 × 384, 6 heads of 64 (23.1M)", evals(HERE / "shape" / "runs" / "f13-384x12"), "C5"),
        ("6 × 768, 12 heads of 64 (46.2M)", evals(HERE / "shape" / "runs" / "f13-768x6"), "C6")]

fig, (left, right) = plt.subplots(1, 2, figsize=(12, 4.8), constrained_layout=True)
for group, colour, label in ((grey, "0.55", "6 × 384, 6 heads of 64 (11.6M), seeds 0-2"),
                             (big, "C3", "12 × 768, 12 heads of 64 (92.4M), seeds 0-1")):
    for i, ev in enumerate(group):
        style = dict(color=colour, lw=1.2, marker="o", ms=2, alpha=0.7, label=label if i == 0 else None)
        left.plot(ev["step"], ev["val_acc"], **style)
        right.plot(ev["step"], ev.apply(answered, axis=1), **style)
for label, ev, colour in runs:
    style = dict(color=colour, lw=2.0, marker="o", ms=3, label=label)
    left.plot(ev["step"], ev["val_acc"], **style)
    right.plot(ev["step"], ev.apply(answered, axis=1), **style)
steps = range(0, 2001, 50)
right.plot(steps, [min(32.0, 1 + 31 * s / 1500) for s in steps], color="0.3", ls="--", lw=1,
           label="widest width trained")
left.set(xlabel="step", ylabel="whole answers right, widths 1–32 (%)", ylim=(0, 100), xlim=(0, 2050),
         title="falcon-1.3: validation accuracy")
right.set(xlabel="step", ylabel="widths 1, 2, … answered (≥ 95%)", ylim=(0, 33), xlim=(0, 2050),
          title="falcon-1.3: widths answered in full")
left.legend(fontsize=7.5, loc="lower right")
right.legend(fontsize=7.5, loc="upper left")
for ax in (left, right):
    ax.grid(alpha=0.3)
fig.savefig(HERE / "heads.png", dpi=120)
