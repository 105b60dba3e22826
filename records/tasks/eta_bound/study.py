"""The table of ``run.sh``: falcon-1.3 with ctxη bounded by the ridge against the key energy alone, per seed and as
mean ± std, at each run's best step (highest whole-sequence accuracy on the trained lengths, earliest among
equals) and its last; with the largest gradient norm and the number of logged steps whose loss rose to twice the
running minimum (loss spikes).

    python records/tasks/eta_bound/study.py RESULTS/mqar [OUT]      # OUT default: this folder/<task>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd

HERE = Path(__file__).resolve().parent


def spikes(metrics: pd.DataFrame) -> int:
    """Logged steps whose loss is at least twice the lowest loss logged before them (after the first tenth)."""
    loss = metrics["loss"].dropna().to_numpy()
    start = max(1, len(loss) // 10)
    return int(sum(loss[i] >= 2 * loss[:i].min() for i in range(start, len(loss))))


def main(results: Path, out: Path) -> None:
    rows = []
    for run in sorted((results / "runs").iterdir()):
        info = json.loads((run / "run.json").read_text())
        if info["status"] != "finished":
            continue
        bound, seed = run.name.split("-")[1], int(run.name.split("-s")[-1])
        m = info["metrics"]
        metrics = pd.read_csv(run / "metrics.csv")
        prov = json.loads((run / "provenance.json").read_text())
        rows.append({"bound": bound, "seed": seed, "best_step": m["best_step"], "val_acc": m["best_val_acc"],
                     "held_out": m["best_ood_mean"], "last_val_acc": m["last_val_acc"],
                     "last_held_out": m["last_ood_mean"], "max_grad_norm": metrics["grad_norm"].max(),
                     "loss_spikes": spikes(metrics), "commit": prov.get("commit"), "run": info["id"]})
    df = pd.DataFrame(rows).sort_values(["bound", "seed"])
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "runs.csv", index=False)
    cols = ["val_acc", "held_out", "last_val_acc", "last_held_out", "max_grad_norm", "loss_spikes"]
    agg = df.groupby("bound")[cols].agg(["mean", "std"])
    lines = ["| eta_bound | seeds | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for bound, r in agg.iterrows():
        n = int((df["bound"] == bound).sum())
        lines.append(f"| {bound} | {n} | " + " | ".join(f"{r[(c, 'mean')]:.1f} ± {r[(c, 'std')]:.1f}" for c in cols)
                     + " |")
    lines += ["", "| eta_bound | seed | best step | " + " | ".join(cols) + " | run |",
              "|---|---|---|" + "---|" * len(cols) + "---|"]
    for _, r in df.iterrows():
        lines.append(f"| {r['bound']} | {r['seed']} | {r['best_step']} | "
                     + " | ".join(f"{r[c]:.1f}" if isinstance(r[c], float) else str(r[c]) for c in cols)
                     + f" | {r['run']} |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    res = Path(sys.argv[1])
    main(res, Path(sys.argv[2]) if len(sys.argv) > 2 else HERE / res.name)
