"""Teacher-forced accuracy (whole answers, per token in brackets) at every evaluation of the three transformer
CPU runs of `../cpu_probe.md`, section "The transformer without positions (NoPE)".
Run from the repository root: python records/addition/cpu_nope/summary.py"""
import csv
from falcon_lab.compact import open_text
for rid, name in (("69e293d4d5", "RoPE, curriculum"), ("9981a9bd39", "NoPE, curriculum"),
                  ("8d2709ceed", "NoPE, curriculum + packing")):
    print(name, rid)
    for r in csv.DictReader(open_text(f"records/addition/cpu_nope/{rid}/evals.csv")):
        w = lambda k, n: f"{float(r[f'{k}@{n}']):.0f}"
        print(f"  {r['step']:>5}  1-8: " + " ".join(f"{w('tf', n)}({w('tok', n)})" for n in range(1, 9)) +
              "  | 9-12: " + " ".join(f"{w('tf', n)}({w('tok', n)})" for n in range(9, 13)))
