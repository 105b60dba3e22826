"""The table and figure of the isolated-offsets calls: the packed-exact schedule (6 x 384, 2000 steps, ramp over
1500, lr 1e-3, 65k tokens a step) with the samples apart (`model.isolate_samples=true`) and half of the samples'
digit indices shifted by a random offset in 0..`model.abacus` (`model.abacus_shift_frac=0.5`), one H200.

For each run: the best step by whole answers over widths 1-32 (the paper's selection) and, at that step and at the
last, whole answers and per-token accuracy over widths 33-48; for each configuration the median and range over its
seeds. Left of the figure: widths 1-32 by step; right: per width 1-48 at the best step.

    python records/addition/isolated-offsets/offsets.py   # writes summary.csv and offsets.png, prints the table
"""

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from falcon_lab.compact import readable

HERE = Path(__file__).resolve().parent
WIDTHS = range(1, 49)
COLOURS = {("deltanet", 32): "C0", ("deltanet", 64): "C3", ("deltanet", 128): "C2",
           ("falcon-1.3", 32): "C1", ("falcon-1a.1", 32): "C4"}
DASHES = {0: "-", 1: (0, (6, 2)), 2: ":"}

rows = []
curves = {}
for folder in sorted((HERE / "runs").iterdir()):
    ev = pd.read_csv(readable(folder / "evals.csv"))
    name = folder.name
    mixer = {"dn": "deltanet", "f13": "falcon-1.3", "f1a1": "falcon-1a.1"}[name.split("-")[0]]
    abacus = int(name.split("-ab")[1].split("-")[0])
    seed = int(name.rsplit("-s", 1)[1])
    best = ev.loc[ev["val_acc"].idxmax()]
    last = ev.iloc[-1]
    answered = sum(best[f"tf@{w}"] >= 96 for w in range(1, 33))
    rows.append(dict(run=name, mixer=mixer, abacus=abacus, seed=seed, best_step=int(best["step"]),
                     val_acc=round(best["val_acc"], 1), widths_answered=answered,
                     ood_mean=round(best["ood_mean"], 1), ood_token_mean=round(best["ood_token_mean"], 1),
                     last_ood_mean=round(last["ood_mean"], 1), last_ood_token_mean=round(last["ood_token_mean"], 1),
                     acc_33=round(best["tf@33"], 1), acc_40=round(best["tf@40"], 1), acc_48=round(best["tf@48"], 1)))
    curves[name] = (mixer, abacus, seed, ev, best)
table = pd.DataFrame(rows).sort_values(["mixer", "abacus", "seed"])
table.to_csv(HERE / "summary.csv", index=False)

print("| run | offset | seed | best step | val. acc. 1-32 | widths 1-32 answered | 33-48 (per token) | last 33-48 (per token) | @33 | @40 | @48 |")
print("|---|---|---|---|---|---|---|---|---|---|---|")
for r in table.itertuples():
    print(f"| `{r.run}` | 0-{r.abacus} | {r.seed} | {r.best_step} | {r.val_acc} | {r.widths_answered} | "
          f"{r.ood_mean} ({r.ood_token_mean}) | {r.last_ood_mean} ({r.last_ood_token_mean}) | {r.acc_33} | {r.acc_40} | {r.acc_48} |")
print()
print("| configuration | seeds | val. acc. 1-32, median (range) | 33-48 median (range) | per token 33-48 median (range) |")
print("|---|---|---|---|---|")
for (mixer, abacus), g in table.groupby(["mixer", "abacus"]):
    def spread(col: str) -> str:
        return f"{g[col].median():.1f} ({g[col].min():.1f}-{g[col].max():.1f})" if len(g) > 1 else f"{g[col].iloc[0]:.1f}"
    print(f"| {mixer}, offset 0-{abacus} | {len(g)} | {spread('val_acc')} | {spread('ood_mean')} | {spread('ood_token_mean')} |")

fig, (left, right) = plt.subplots(1, 2, figsize=(14, 5.5), constrained_layout=True)
for name, (mixer, abacus, seed, ev, best) in curves.items():
    style = dict(color=COLOURS[(mixer, abacus)], ls=DASHES[seed], lw=1.8)
    left.plot(ev["step"], ev["val_acc"], marker="o", ms=3, label=f"{mixer}, offset 0-{abacus}, seed {seed}", **style)
    right.plot(WIDTHS, [best[f"tf@{w}"] for w in WIDTHS], **style)
left.set(xlabel="step", ylabel="whole answers right, widths 1–32 (%)", ylim=(0, 101), xlim=(0, 2050),
         title="validation accuracy by step")
left.legend(fontsize=8, loc="lower right")
right.axvspan(32.5, 48.5, color="0.92", zorder=0)
right.text(33.5, 104, "untrained widths 33–48", fontsize=9, color="0.3")
right.set(xlabel="operand width (digits)", ylabel="whole answers right at the best step (%)", ylim=(-2, 110),
          xlim=(1, 48), title="per width, best step by widths 1–32")
fig.suptitle("Samples apart, half of them with digit indices offset by 0–A (one H200, 11.6M parameters, 2000 steps):\n"
             "DeltaNet fits widths 1–32 and answers the first widths past them; falcon-1.3 and falcon-1a.1 do not fit")
fig.savefig(HERE / "offsets.png", dpi=120)
