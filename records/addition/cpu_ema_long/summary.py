"""Every evaluation of the two 4000-step runs of this folder, the weights' average (`evals.csv`) beside the trained
weights (`evals_raw.csv`): the least whole-answer accuracy over the trained widths 1-8, whole answers at widths 9-12
and per token there (20 teacher-forced samples a width). Run from the repository root:

    python records/addition/cpu_ema_long/summary.py
"""
import csv

for rid, seed in (("6b9a673e33", 0), ("d4e064dfb2", 3)):
    print(f"DeltaNet seed {seed} ({rid}): step | average: least of 1-8, whole 9-12, per token 9-12 | trained weights")
    read = {name: {r["step"]: r for r in csv.DictReader(open(f"records/addition/cpu_ema_long/{rid}/{name}"))}
            for name in ("evals.csv", "evals_raw.csv")}

    def cells(r: dict) -> str:
        least = min(float(r[f"tf@{w}"]) for w in range(1, 9))
        whole = " ".join(f"{float(r[f'tf@{w}']):3.0f}" for w in range(9, 13))
        token = " ".join(f"{float(r[f'tok@{w}']):3.0f}" for w in range(9, 13))
        return f"{least:3.0f} | {whole} | {token}"

    for step, r in read["evals.csv"].items():
        print(f"  {step:>5}  {cells(r)}  ||  {cells(read['evals_raw.csv'][step])}")
