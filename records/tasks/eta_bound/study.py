"""The table of ``run.sh``: falcon-1.3 with ctxη bounded by the ridge against the key energy alone, per seed and as
mean ± std, at each run's best step (highest whole-sequence accuracy on the trained lengths, earliest among
equals) and its last; with the largest gradient norm logged, and, from the best weights, where the transitions'
eigenvalues along the written key went on held-out sequences (every write of every token, head and layer:
γ − η‖x‖², records/tasks/beta/study.py's census): the share below −1 and the lowest.

    python records/tasks/eta_bound/study.py RESULTS/mqar [OUT]      # OUT default: this folder/<task>
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pandas as pd
import torch
import yaml

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

from lab.eval.run_weights import load_run_model  # noqa: E402
from mixers.falcon import FalconMixer  # noqa: E402
from tasks.synthetic import eval_samples, make_task, pad_batch  # noqa: E402


def eigenvalues(run: Path) -> torch.Tensor:
    """Every regression write's eigenvalue along its key, γ − η‖x‖², on 8 held-out sequences at every 8th
    held-out length, from the run's best weights (ctxη: η as emitted; shifted pairs: x_t = k_{t−1})."""
    rm = load_run_model(run, "best", "cpu")
    found: list[torch.Tensor] = []
    for m in rm.model.modules():
        if isinstance(m, FalconMixer):
            def falcon_rule(q, k, v, gain, lam, samples=None, m=m, rule=m._rule):
                o = m.opts
                energy = (k.float() ** 2).sum(-1)[:, :-1]
                eta, lb = gain[:, 1:].float(), lam[:, 1:].float()
                lam_t = lb * energy if o.scale_coupled_ridge else lb
                carry = 1 - torch.clamp(eta * lam_t, max=1 - o.decay_floor)
                found.append((carry - eta * energy).flatten())
                return rule(q, k, v, gain, lam, samples)
            m._rule = falcon_rule
    cfg = yaml.safe_load((run / "config.yaml").read_text())
    d = cfg["data"]
    task = make_task(cfg["task"], vocab_size=d["vocab_size"], tokens_per_pair=d["tokens_per_pair"], group=d["group"])
    lo, hi = cfg["data"]["test_lengths"]
    with torch.no_grad():
        for length in range(lo, hi + 1, 8):
            ids, _ = pad_batch(eval_samples(task, "test", length, 8, seed=0))
            rm.model(ids)
    return torch.cat(found)


def main(results: Path, out: Path) -> None:
    rows = []
    for run in sorted((results / "runs").iterdir()):
        info = json.loads((run / "run.json").read_text())
        if info["status"] != "finished":
            continue
        bound, seed = run.name.split("-")[1], int(run.name.split("-s")[-1])
        m = info["metrics"]
        metrics = pd.read_csv(run / "metrics.csv")
        eig = eigenvalues(run) if (run / "checkpoints" / "best.pt").exists() else torch.tensor([float("nan")])
        prov = json.loads((run / "provenance.json").read_text())
        rows.append({"bound": bound, "seed": seed, "best_step": m["best_step"], "val_acc": m["best_val_acc"],
                     "held_out": m["best_ood_mean"], "last_val_acc": m["last_val_acc"],
                     "last_held_out": m["last_ood_mean"], "max_grad_norm": metrics["grad_norm"].max(),
                     "below_minus_1": 100 * float((eig < -1).float().mean()), "lowest": float(eig.min()),
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
