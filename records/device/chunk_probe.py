"""Does a trained Falcon model's accuracy per width depend on how its rule is computed? The best weights of each
run given are evaluated teacher-forced on widths LO..HI (100 samples a width) with every Falcon mixer's rule run
by the fused Triton kernels at chunks of 64, 32 and 16 tokens, by the PyTorch chunk form, and token by token
(the recurrent form), in float32 and (the first) under bf16 autocast as in training. A kernel fault at a chunk
boundary moves the widths answered with the chunk; a limit the model learned does not move.

    python records/device/chunk_probe.py RUN_DIR [RUN_DIR ...] [--widths 14-24] [--n 100]
"""

from __future__ import annotations

import argparse
import contextlib
import pathlib
import sys
from dataclasses import replace

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[2]))

import torch

from falcon_lab.eval.addition import evaluate_addition
from falcon_lab.eval.run_weights import load_run_model
from falcon_lab.mixers.falcon import FalconMixer


def set_rule(model: torch.nn.Module, backend: str, chunk: int) -> None:
    for m in model.modules():
        if isinstance(m, FalconMixer):
            m.opts = replace(m.opts, backend=backend)
            m.chunk_size = chunk


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+")
    ap.add_argument("--widths", default="14-24")
    ap.add_argument("--n", type=int, default=100)
    args = ap.parse_args()
    lo, hi = (int(x) for x in args.widths.split("-"))
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    gpu = torch.cuda.is_available()
    settings = [("triton", 64, True), ("triton", 64, False), ("triton", 32, False), ("triton", 16, False),
                ("chunk", 64, False), ("recurrent", 64, False)] if gpu else [
                ("chunk", 64, False), ("chunk", 16, False), ("recurrent", 64, False)]
    for run in args.runs:
        rm = load_run_model(run, "best", device)
        print(f"{run}: best step {rm.step}, mixer {rm.cfg.mixer}, trained chunk {rm.cfg.model.mixer_options}")
        print("  setting              " + " ".join(f"{w:>5d}" for w in range(lo, hi + 1)))
        for backend, chunk, bf16 in settings:
            set_rule(rm.model, backend, chunk)
            ctx = torch.autocast("cuda", torch.bfloat16) if bf16 else contextlib.nullcontext()
            with ctx:
                rep = evaluate_addition(rm.model, n_per_length=args.n, val_widths=range(lo, hi + 1),
                                        ood_widths=range(0), device=device)
            name = f"{backend} c{chunk}{' bf16' if bf16 else ''}"
            print(f"  {name:20s} " + " ".join(f"{rep.teacher_forced[w]:5.0f}" for w in range(lo, hi + 1)),
                  flush=True)


if __name__ == "__main__":
    main()
