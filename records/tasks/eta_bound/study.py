"""The table of ``run.sh``: falcon-1.3 with ctxη bounded by the ridge against the key energy alone, per seed and as
mean ± std, at each run's best step (highest whole-sequence accuracy on the trained lengths, earliest among
equals) and its last; with the largest gradient norm logged, and, from the best weights, where the transitions'
eigenvalues along the written key went on held-out sequences (every write of every token, head and layer:
γ − η‖x‖², by records/tasks/beta/study.py's census): the share below −1 and the lowest.

    python records/tasks/eta_bound/study.py RESULTS/mqar [OUT]      # OUT default: this folder/<task>
"""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pandas as pd
import torch
import yaml
from falcon_lab.compact import readable

HERE = Path(__file__).resolve().parent
_spec = importlib.util.spec_from_file_location("beta_study", HERE.parent / "beta" / "study.py")
beta_study = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(beta_study)  # the eigenvalue census of ../beta, per rule
eigenvalues = beta_study.eigenvalues


def main(results: Path, out: Path) -> None:
    rows = []
    for run in sorted((results / "runs").iterdir()):
        info = json.loads((run / "run.json").read_text())
        if info["status"] != "finished":
            continue
        bound, seed = run.name.split("-")[1], int(run.name.split("-s")[-1])
        m = info["metrics"]
        metrics = pd.read_csv(readable(run / "metrics.csv"))
        task = yaml.safe_load((run / "config.yaml").read_text())["task"]
        census = (run / "checkpoints" / "best.pt").exists() and task != "addition"
        eig = eigenvalues(run) if census else torch.tensor([float("nan")])  # the census reads synthetic tasks
        prov = json.loads((run / "provenance.json").read_text())
        rows.append({"bound": bound, "seed": seed, "best_step": m["best_step"], "val_acc": m["best_val_acc"],
                     "held_out": m["best_ood_mean"], "last_val_acc": m["last_val_acc"],
                     "last_held_out": m["last_ood_mean"], "max_grad_norm": metrics["grad_norm"].max(),
                     "below_minus_1": 100 * float((eig < -1).float().mean()) if census else float("nan"),
                     "lowest": float(eig.min()),
                     "commit": prov.get("commit"), "run": info["id"]})
    df = pd.DataFrame(rows).sort_values(["bound", "seed"])
    out.mkdir(parents=True, exist_ok=True)
    df.to_csv(out / "runs.csv", index=False)
    cols = ["val_acc", "held_out", "last_val_acc", "last_held_out", "max_grad_norm", "below_minus_1", "lowest"]
    agg = df.groupby("bound")[cols].agg(["mean", "std"])
    lines = ["| eta_bound | seeds | " + " | ".join(cols) + " |", "|---|---|" + "---|" * len(cols)]
    for bound, r in agg.iterrows():
        n = int((df["bound"] == bound).sum())
        lines.append(f"| {bound} | {n} | " + " | ".join(f"{r[(c, 'mean')]:.2f} ± {r[(c, 'std')]:.2f}" if c == "lowest"
                                                   else f"{r[(c, 'mean')]:.1f} ± {r[(c, 'std')]:.1f}" for c in cols)
                     + " |")
    lines += ["", "| eta_bound | seed | best step | " + " | ".join(cols) + " | run |",
              "|---|---|---|" + "---|" * len(cols) + "---|"]
    for _, r in df.iterrows():
        lines.append(f"| {r['bound']} | {r['seed']} | {r['best_step']} | "
                     + " | ".join(f"{r[c]:.3f}" if c == "lowest" else f"{r[c]:.1f}" for c in cols)
                     + f" | {r['run']} |")
    (out / "table.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    res = Path(sys.argv[1])
    main(res, Path(sys.argv[2]) if len(sys.argv) > 2 else HERE / res.name)
