"""Every recorded addition run of one mixer, regime by regime: its size, schedule, curriculum, packing, learning
rate, batch, whether its samples were kept apart, its digit positions (None: none; 0: exact; K: offsets 0..K) and
options, and its best step (highest accuracy on widths 1-32, earliest among equals) with the accuracy there on
widths 1-32 and over 33-48. The regimes a row was tried in, for a row that does not fit (issue 29: show why).

    python records/addition/same-time/regimes.py mamba2    # prints a markdown table
"""

import sys
from pathlib import Path

import pandas as pd
import yaml

from falcon_lab.compact import readable

ADDITION = Path(__file__).resolve().parents[1]


def regimes(mixer: str) -> list[dict]:
    rows = []
    for cfg_path in sorted(ADDITION.rglob("config.yaml")):
        folder, evals = cfg_path.parent, readable(cfg_path.parent / "evals.csv")
        cfg = yaml.safe_load(cfg_path.read_text())
        if cfg.get("mixer") != mixer or not evals.is_file():
            continue
        e = pd.read_csv(evals)
        if e.empty:
            continue
        best = e.loc[e["val_acc"].idxmax()]
        m, t, d = cfg["model"], cfg["train"], cfg["data"]
        rows.append({"run": str(folder.relative_to(ADDITION)), "size": f"{m['d_model']} x {m['n_layers']}",
                     "steps": t["max_steps"], "curriculum": d.get("curriculum"), "packed": bool(d.get("packing")), "lr": f"{cfg['optim']['lr']:g}", "batch": t["batch_size"],
                     "apart": bool(m.get("isolate_samples")), "digit positions": m.get("abacus"),
                     "options": m.get("mixer_options") or "", "best step": int(best["step"]),
                     "val. acc. 1-32": round(float(best["val_acc"]), 1),
                     "mean 33-48": round(float(best["ood_mean"]), 1)})
    return rows


if __name__ == "__main__":
    rows = regimes(sys.argv[1] if len(sys.argv) > 1 else "mamba2")
    print("| " + " | ".join(rows[0]) + " |\n|" + "---|" * len(rows[0]))
    for row in rows:
        print("| " + " | ".join(f"`{v}`" if k == "run" else str(v) for k, v in row.items()) + " |")
