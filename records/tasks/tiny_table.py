"""The table of records/tasks/tiny.md from the runs of a results folder: every finished run of the synthetic
tasks at its best step (highest accuracy on the train lengths), with the longest length reached.

    python records/tasks/tiny_table.py [RESULTS]   # default $LAB_RESULTS or results/
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import yaml

from falcon_lab.eval.callback import pick_best, read_evals
from falcon_lab.paths import results_root

TASKS = ("parity", "mqar", "permutation")


def reach(per_length: dict[int, float], start: int, at_least: float = 95.0) -> int:
    """The longest length L such that every length start..L is right in >= `at_least` % of samples (start − 1: none)."""
    n = start
    while per_length.get(n, 0.0) >= at_least:
        n += 1
    return n - 1


def main() -> None:
    root = Path(sys.argv[1]) if len(sys.argv) > 1 else results_root()
    rows = []
    for run in sorted((root / "runs").glob("*/run.json")):
        state = json.loads(run.read_text())
        cfg = yaml.safe_load((run.parent / "config.yaml").read_text())
        if state["status"] != "finished" or cfg["task"] not in TASKS:
            continue
        best = pick_best(read_evals(run.parent / "evals.csv"))
        lo, hi = cfg["data"]["lengths"]
        m = state["metrics"]
        rows.append((cfg["task"], cfg["preset"], cfg["mixer"], cfg["train"]["seed"], best["step"],
                     best["val_acc"], best["val_token_acc"], best["ood_mean"], best["ood_token_mean"],
                     reach(best["teacher_forced"], lo), lo, hi, m["elapsed_s"], run.parent.name))
    print("| task | preset | mixer | seed | best step | val. acc. | val. per token | held-out acc. | held-out per "
          "token | reach (trained) | wall s | run |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (TASKS.index(r[0]), r[2], r[3])):
        reached = str(r[9]) if r[9] >= r[10] else "none"
        print(f"| {r[0]} | {r[1]} | {r[2]} | {r[3]} | {r[4]} | {r[5]:.1f} | {r[6]:.1f} | {r[7]:.1f} | {r[8]:.1f} | "
              f"{reached} ({r[10]}-{r[11]}) | {r[12]:.0f} | {r[13]} |")


if __name__ == "__main__":
    main()
