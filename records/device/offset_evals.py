"""Teacher-forced accuracy of runs with digit positions evaluated at several fixed offsets (`eval.abacus_offset`
after the fact): one row per run, weights and offset in offsets.csv, and every answer position at each offset in
positions_<run>_<which>_<offset>.csv. Usage: python records/device/offset_evals.py OUT_DIR OFFSETS RUN_DIR...
(OFFSETS comma-separated, e.g. 0,8,16). Loads each run's best and last weights once."""

from __future__ import annotations

import sys
from pathlib import Path

import pandas as pd
import torch

from falcon_lab.eval.addition import evaluate_addition, position_accuracy, position_rows
from falcon_lab.eval.run_weights import load_run_model


def main(out: Path, offsets: list[int], runs: list[Path]) -> None:
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    for run in runs:
        for which in ("best", "last"):
            try:
                loaded = load_run_model(run, which, device)
            except ValueError as err:
                print(f"{run}: {err}")
                continue
            for offset in offsets:
                if offset > loaded.cfg.model.abacus:
                    continue
                loaded.model.cfg.abacus_eval_offset = offset
                with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                    summary = evaluate_addition(loaded.model, n_per_length=100, device=device).summary()
                    positions = position_accuracy(loaded.model, n_per_length=100, device=device)
                rows.append({"run": run.name, "which": which, "step": loaded.step, "offset": offset, **summary})
                pd.DataFrame(position_rows(positions, run=run.name, which=which, step=loaded.step, samples=100,
                                           abacus_offset=offset)).to_csv(
                    out / f"positions_{run.name}_{which}_{offset}.csv", index=False)
                print(f"{run.name} {which} step {loaded.step} offset {offset}: val {summary['val_acc']:.1f} "
                      f"mean 33-48 {summary['ood_mean']:.1f} per token 33-48 {summary['ood_token_mean']:.1f}",
                      flush=True)
    pd.DataFrame(rows).to_csv(out / "offsets.csv", index=False)


if __name__ == "__main__":
    main(Path(sys.argv[1]), [int(x) for x in sys.argv[2].split(",")], [Path(p) for p in sys.argv[3:]])
