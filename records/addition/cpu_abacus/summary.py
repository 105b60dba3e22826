"""Teacher-forced accuracy (whole answers, per token in brackets for widths 9-16) at every evaluation of the CPU
runs with digit positions of `../cpu_probe.md`, section "Digit positions (Abacus embeddings)".
Run from the repository root: python records/addition/cpu_abacus/summary.py"""
import csv
import os
from falcon_lab.compact import open_text, readable

RUNS = (("d4ff6af32b", "falcon-1.3, packing"), ("106c61c833", "transformer (RoPE), packing"),
        ("7aaa0eb550", "transformer (NoPE), packing"), ("94e22c08a4", "transformer (NoPE), no packing"),
        ("59a7b4a6ac", "transformer (NoPE), packing, 6000 steps"),
        ("055406a5e8", "transformer (NoPE), packing, 6000 steps, seed 1"))
for rid, name in RUNS:
    path = readable(f"records/addition/cpu_abacus/{rid}/evals.csv")  # or its compacted evals.csv.gz
    if not os.path.exists(path):
        continue
    print(name, rid)
    for r in csv.DictReader(open_text(path)):
        w = lambda k, n: f"{float(r[f'{k}@{n}']):.0f}"
        print(f"  {r['step']:>5}  1-8: " + " ".join(w('tf', n) for n in range(1, 9)) +
              "  | 9-16: " + " ".join(f"{w('tf', n)}({w('tok', n)})" for n in range(9, 17)))
