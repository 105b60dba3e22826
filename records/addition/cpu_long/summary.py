"""Teacher-forced accuracy (whole answers, and per token in brackets for widths 9-12) at every evaluation of the
two 6000-step CPU runs of `../cpu_probe.md`, section "Twice the steps past the trained widths".
Run from the repository root: python records/addition/cpu_long/summary.py"""
import csv, sys
from falcon_lab.compact import open_text
for rid, name in (("8fe97ed828", "falcon-1.3"), ("5d478512ee", "falcon-1a.3")):
    rows = list(csv.DictReader(open_text(f"records/addition/cpu_long/{rid}/evals.csv")))
    print(name, rid)
    for r in rows:
        w = lambda k, n: f"{float(r[f'{k}@{n}']):.0f}"
        print(f"  {r['step']:>5}  1-8: " + " ".join(w('tf', n) for n in range(1, 9)) +
              "  | 9-12: " + " ".join(f"{w('tf', n)}({w('tok', n)})" for n in range(9, 13)))
