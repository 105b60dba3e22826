"""The S5 probe's runs (`runs/<name>/evals.csv`), one line per evaluation: whole words right and per-token accuracy
(%) at each trained length, and the held-out mean; written to `summary.md`.

    python records/tasks/s5_probe/summary.py
"""

from __future__ import annotations

import csv
from pathlib import Path

from falcon_lab.compact import open_text, readable

HERE = Path(__file__).resolve().parent
NAMES = {"tf": "Transformer", "f13": "Falcon-1.3", "dn1": "DeltaNet (β < 1)", "dn2": "DeltaNet (β < 2)",
         "dn1-12k": "DeltaNet (β < 1), 12000 steps", "dn2-12k": "DeltaNet (β < 2), 12000 steps",
         "dn1-cur": "DeltaNet (β < 1), length curriculum", "dn2-cur": "DeltaNet (β < 2), length curriculum"}


def main() -> None:
    lines = ["| run | step | whole words right, lengths 1–8 | per token, lengths 1–8 | held out 9–32 |",
             "|---|---|---|---|---|"]
    for name, label in NAMES.items():
        path = readable(HERE / "runs" / name / "evals.csv")  # or its compacted evals.csv.gz
        if not path.is_file():
            continue
        with open_text(path) as f:
            rows = list(csv.DictReader(f))
        for r in rows:
            whole = " / ".join(f"{float(r[f'tf@{n}']):.0f}" for n in range(1, 9))
            token = " / ".join(f"{float(r[f'tok@{n}']):.0f}" for n in range(1, 9))
            lines.append(f"| {label} | {r['step']} | {whole} | {token} | {float(r['ood_mean']):.1f} |")
    text = ("Written by `summary.py` from each run's `evals.csv` (16 samples a length).\n\n" + "\n".join(lines) + "\n")
    (HERE / "summary.md").write_text(text, encoding="utf-8")
    print(text)


if __name__ == "__main__":
    main()
