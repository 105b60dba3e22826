"""Every evaluation of a toy DeltaNet run with `train.ema`, the weights' average (`evals.csv`) beside the trained
weights (`evals_raw.csv`): the least whole-answer accuracy over the trained widths 1-8, whole answers at widths 9-12
and per token there (20 teacher-forced samples a width). Run from the repository root:

    python records/addition/cpu_ema_long/summary.py                          # this folder's two 4000-step runs
    python records/addition/cpu_ema_long/summary.py records/addition/cpu_ema_lr   # any folder of such runs
"""
import csv
import sys
from pathlib import Path

import yaml

from falcon_lab.compact import open_text

folder = Path(sys.argv[1] if len(sys.argv) > 1 else "records/addition/cpu_ema_long")
runs = sorted(((p.parent.name, yaml.safe_load(open(p.parent / "config.yaml"))["train"]["seed"])
               for p in [*folder.glob("*/evals_raw.csv"), *folder.glob("*/evals_raw.csv.gz")]), key=lambda run: run[1])
for rid, seed in runs:
    print(f"DeltaNet seed {seed} ({rid}): step | average: least of 1-8, whole 9-12, per token 9-12 | trained weights")
    read = {name: {r["step"]: r for r in csv.DictReader(open_text(folder / rid / name))}
            for name in ("evals.csv", "evals_raw.csv")}

    def cells(r: dict) -> str:
        least = min(float(r[f"tf@{w}"]) for w in range(1, 9))
        whole = " ".join(f"{float(r[f'tf@{w}']):3.0f}" for w in range(9, 13))
        token = " ".join(f"{float(r[f'tok@{w}']):3.0f}" for w in range(9, 13))
        return f"{least:3.0f} | {whole} | {token}"

    for step, r in read["evals.csv"].items():
        print(f"  {step:>5}  {cells(r)}  ||  {cells(read['evals_raw.csv'][step])}")
