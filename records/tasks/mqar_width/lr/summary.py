"""The learning-rate probes of MQAR at d_model 128 (README.md beside this file): each run's settings and its best
evaluation (highest whole-sequence accuracy on the train lengths, earliest among equals).

    python records/tasks/mqar_width/lr/summary.py [RUNS]   # RUNS: folder of run folders (default: runs/ here)
"""

from __future__ import annotations

import csv
import sys
from pathlib import Path

import yaml
from falcon_lab.compact import open_text, readable

HERE = Path(__file__).resolve().parent


def main() -> None:
    runs = Path(sys.argv[1]) if len(sys.argv) > 1 else HERE / "runs"
    print("| run | mixer | lr | batch | steps | best step | val. acc. 16–32 | held-out 33–64 | held-out per answer |")
    print("|---|---|---|---|---|---|---|---|---|")
    for run in sorted(p for p in runs.iterdir() if readable(p / "evals.csv").exists()):
        cfg = yaml.safe_load((run / "config.yaml").read_text())
        rows = list(csv.DictReader(open_text(run / "evals.csv")))
        best = max(rows, key=lambda r: (float(r["val_acc"]), -int(r["step"])))
        print(f"| `{run.name}` | {cfg['mixer']} | {cfg['optim']['lr']:g} | {cfg['train']['batch_size']} | "
              f"{cfg['train']['max_steps']} | {best['step']} | {float(best['val_acc']):.1f} | "
              f"{float(best['ood_mean']):.1f} | {float(best['ood_token_mean']):.1f} |")


if __name__ == "__main__":
    main()
