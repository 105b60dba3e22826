"""Where an addition run's transitions went: every write's eigenvalue along its key (Falcon regression rules:
γ − η‖x‖²; inner-product rules: γ; DeltaNet: 1 − β), from a run's best, last or failed weights
(`checkpoints/failed.pt`, kept by a run that stopped on a non-finite loss), over teacher-forced addition samples of
widths 1-48 (the run's own evaluation). Prints the share of writes below −1 and below 0, the lowest, and the
lowest per layer; on a GPU where the weights lie (a 92M model's weights do not travel back from the device).

    python records/device/census.py RUN [RUN ...] [--which failed|best|last] [--per-width 8]
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from falcon_lab.eval.addition import evaluate_addition  # noqa: E402
from falcon_lab.eval.run_weights import load_run_model  # noqa: E402
from falcon_lab.mixers.deltanet import DeltaNet  # noqa: E402
from falcon_lab.mixers.falcon import FalconMixer  # noqa: E402

_spec = importlib.util.spec_from_file_location("beta_study", ROOT / "records" / "tasks" / "beta" / "study.py")
beta_study = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(beta_study)


def census(run: Path, which: str, per_width: int, device: str) -> str:
    rm = load_run_model(run, which, device)
    layers = [m for m in rm.model.modules() if isinstance(m, (FalconMixer, DeltaNet))]  # those hook_census hooks
    found = beta_study.hook_census(rm.model)
    with torch.no_grad():
        evaluate_addition(rm.model, n_per_length=per_width, val_widths=range(1, 33), ood_widths=range(33, 49))
    if not found:
        return f"{run}: no Falcon or DeltaNet mixer"
    every = torch.cat(found)
    n = len(layers) or 1  # the hooks append layer by layer, forward after forward
    per_layer = [torch.cat(found[i::n]).min().item() for i in range(n)]
    return (f"{run} ({which} weights, step {rm.step}): {every.numel()} writes, below -1 "
            f"{100 * (every < -1).float().mean():.3f}%, below 0 {100 * (every < 0).float().mean():.2f}%, lowest "
            f"{every.min():.3f}; lowest per layer " + " ".join(f"{v:.3f}" for v in per_layer))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("runs", nargs="+", type=Path)
    p.add_argument("--which", default="best", choices=("best", "last", "failed"))
    p.add_argument("--per-width", type=int, default=8)
    args = p.parse_args()
    device = "cuda" if torch.cuda.is_available() else "cpu"
    for run in args.runs:
        try:
            print(census(run, args.which, args.per_width, device), flush=True)
        except ValueError as err:
            print(f"{run}: {err}", flush=True)


if __name__ == "__main__":
    main()
