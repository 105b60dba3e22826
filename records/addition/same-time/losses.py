"""Training loss by step of the same-time table's rows (the median over a row's seeds of the loss averaged over 10
logged steps), with RetNet's run with RoPE (`retnet-rope/`; the table's RetNet row goes without it), and the widest
width the curriculum trains at each step: the rows that fit (loss falling under 0.01 while the widths grow) against
the ones that do not (RetNet with RoPE, Mamba-2's seed 0, whose loss climbs with the widths, and Gated DeltaNet's
seed 1). Mamba-2's and Gated DeltaNet's seeds part (some fit widths 1-32, some do not), so they are drawn one by one,
as is every row in SPLIT: a median of runs that part is a curve none of them followed. A run is dashed when its best
val. acc. 1-32 is under 99 (`progress.csv`); of a split row's seeds that fit, seed 2 is drawn dash-dotted.

    python records/addition/same-time/losses.py   # writes losses.png beside it
"""

import json
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import pandas as pd
from falcon_lab.compact import readable

HERE = Path(__file__).resolve().parent
SOURCES = (HERE / "runs", HERE / "retnet-rope", HERE.parent / "falcon-same-time" / "runs",
           HERE.parent / "isolated-offsets" / "runs")
STYLE = {  # row: (label, colour, line)
    "transformer": ("Transformer (RoPE)", "0.25", "-"),
    "falcon-1a.1": ("Falcon-1A.1", "C0", "-"), "falcon-1a.2": ("Falcon-1A.2", "C9", "-"),
    "falcon-1a.3": ("Falcon-1A.3", "C2", "-"), "falcon-3a.3": ("Falcon-3A.3", "olive", "-"),
    "falcon-1.3": ("Falcon-1.3", "C4", "-"), "falcon-3": ("Falcon-3", "C7", "-"),
    "falcon-2": ("Falcon-2", "C8", "-"), "falcon-2a": ("Falcon-2A", "navy", "-"),
    "deltanet": ("DeltaNet", "C1", "-"), "gated-deltanet": ("Gated DeltaNet", "C5", "-"),
    "mamba2": ("Mamba-2", "C3", "-"), "retnet-rope": ("RetNet (RoPE)", "C6", "--"),
    "retnet": ("RetNet (NoPE)", "C6", "-"),
}

folders = {json.loads((f / "run.json").read_text())["id"]: f
           for src in SOURCES if src.is_dir() for f in src.iterdir() if (f / "run.json").is_file()}
SPLIT = {"mamba2", "gated-deltanet"}  # rows whose seeds part: drawn one by one
progress = pd.read_csv(HERE / "progress.csv")
best = progress.groupby("run_id")["val_acc"].max()
plan = progress[["row", "seed", "run_id"]].drop_duplicates()
chosen = [(r.row, r.seed, r.run_id) for r in plan.itertuples()]
chosen += [("retnet-rope", 0, "df880929c1")]
curves: dict[str, list[pd.Series]] = {}
singles: list[tuple[str, int, str, pd.Series]] = []
for row, seed, run_id in chosen:
    if row not in STYLE or run_id not in folders:
        continue
    m = pd.read_csv(readable(folders[run_id] / "metrics.csv")).dropna(subset=["loss"]).drop_duplicates("step", keep="last")
    loss = m.set_index("step")["loss"].rolling(10, min_periods=1).mean()
    if row in SPLIT:
        singles.append((row, seed, run_id, loss))
    else:
        curves.setdefault(row, []).append(loss)

fig, ax = plt.subplots(figsize=(9, 5.2), constrained_layout=True)
for row, (label, colour, line) in STYLE.items():
    if row not in curves:
        continue
    median = pd.concat(curves[row], axis=1).median(axis=1)
    n = len(curves[row])
    ax.plot(median.index, median.values, color=colour, ls=line, lw=1.6,
            label=f"{label}, {n} seed{'s' if n > 1 else ''}")
for row, seed, run_id, loss in singles:
    label, colour, _ = STYLE[row]
    fits = best.get(run_id, 0.0) >= 99.0
    ax.plot(loss.index, loss.values, color=colour, ls=("-", "-", (0, (5, 1, 1, 1)))[seed % 3] if fits else "--",
            lw=1.6 if fits else 1.3,
            alpha=1.0 if fits else 0.8, label=f"{label}, seed {seed} ({best.get(run_id, 0.0):.1f} on 1-32)")
ax.set_yscale("log")
ax.set_ylim(1e-4, 4)
ax.set_xlabel("training step")
ax.set_ylabel("training loss (log; median of seeds)")
ax.grid(alpha=0.3)
width = ax.twinx()
width.plot([0, 1500, 2000], [1, 32, 32], color="0.55", lw=1, ls=(0, (4, 2)))
width.set_ylim(0, 34)
width.set_ylabel("widest trained width (grey dashes)", color="0.45")
width.tick_params(colors="0.45")
ax.legend(fontsize=8, loc="lower left", ncol=2)
fig.suptitle("same-time: training loss by step (mean of 10 logged steps); dashed: the runs that do not fit widths 1-32",
             fontsize=11)
fig.savefig(HERE / "losses.png", dpi=120)
print(f"{len(chosen)} runs, {sum(len(c) for c in curves.values()) + len(singles)} drawn: {HERE / 'losses.png'}")
