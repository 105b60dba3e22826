"""Teacher-forced accuracy (whole answers, per token in brackets) at every evaluation of the RetNet and Mamba-2
CPU runs of `../cpu_probe.md`, section "RetNet and Mamba-2 under the Falcon rules' regime".
Run from the repository root: python records/addition/cpu_baselines/summary.py"""
import csv
from falcon_lab.compact import open_text
for rid, name in (("1219d4358d", "retnet"), ("16f2c1b607", "mamba2")):
    print(name, rid)
    for r in csv.DictReader(open_text(f"records/addition/cpu_baselines/{rid}/evals.csv")):
        w = lambda k, n: f"{float(r[f'{k}@{n}']):.0f}"
        print(f"  {r['step']:>5}  1-8: " + " ".join(f"{w('tf', n)}({w('tok', n)})" for n in range(1, 9)) +
              "  | 9-12: " + " ".join(f"{w('tf', n)}({w('tok', n)})" for n in range(9, 13)))
