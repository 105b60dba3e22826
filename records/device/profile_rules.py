"""Where one row of `lab bench kernels` spends its GPU time: the row's own inputs and call (`falcon_lab.bench.ops`), bf16,
forward and backward, after two warm-up passes (Triton's compilation and autotuning), under torch.profiler: the GPU
time of every kernel, the count launched, and the share of the largest. Issue 30 asks a profile of every miss; this
is the one the falcon-3 and falcon-3a rows lacked at the bench's shapes.

    python records/device/profile_rules.py --row falcon-3 --row falcon-3a --shape 8,2048,12,64 --shape 4,4096,16,128

A row is named as the bench names it (`falcon-1 λ=0`, `falcon-2`, `falcon-2 substitution`, `falcon-3`,
`falcon-1a`, `falcon-2a`, `falcon-3a`, `gated delta rule`, the fla anchors `fla chunk_delta_rule`, ...).
Needs a CUDA device (the bench's inputs are made there).
"""

from __future__ import annotations

import argparse
import sys

import torch
from torch.profiler import ProfilerActivity, profile


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--row", action="append", required=True, help="a row of lab bench kernels (repeatable)")
    ap.add_argument("--shape", action="append", default=None, help="B,T,H,D (repeatable; default 8,2048,12,64)")
    ap.add_argument("--top", type=int, default=15, help="kernels listed a row and shape")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        sys.exit("profile_rules.py needs a CUDA device: the bench's inputs are made on it")
    from falcon_lab.bench.ops import anchor_ops, rule_ops

    rules = ("falcon-1", "falcon-2", "falcon-3", "falcon-1a", "falcon-2a", "falcon-3a")
    ops = {op.name: op for op in rule_ops(rules) + anchor_ops()}
    unknown = [r for r in args.row if r not in ops]
    if unknown:
        sys.exit(f"unknown row(s) {unknown}; the rows: {', '.join(ops)}")
    shapes = [tuple(int(n) for n in s.split(",")) for s in (args.shape or ["8,2048,12,64"])]
    for shape in shapes:
        for name in args.row:
            op = ops[name]
            why = op.missing()
            if why:
                print(f"== {name} at {'x'.join(map(str, shape))}: not run ({why})")
                continue
            x = op.make(shape, torch.bfloat16, 0)
            leaves = [t.requires_grad_() for t in x.values() if t.is_floating_point()]

            def step() -> None:
                for t in leaves:
                    t.grad = None
                op.call(x).float().sum().backward()

            for _ in range(2):
                step()
            torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                step()
                torch.cuda.synchronize()
            events = [e for e in prof.key_averages() if e.device_type.name == "CUDA"]
            own = "self_device_time_total" if events and hasattr(events[0], "self_device_time_total") \
                else "self_cuda_time_total"
            total = sum(getattr(e, own) for e in events)
            print(f"== {name} at {'x'.join(map(str, shape))}, fwd+bwd: {total / 1e3:.2f} ms of GPU time in "
                  f"{sum(e.count for e in events)} kernels")
            for e in sorted(events, key=lambda e: -getattr(e, own))[: args.top]:
                t = getattr(e, own)
                print(f"  {t / 1e3:8.3f} ms {100 * t / max(total, 1):5.1f}%  x{e.count:<4d} {e.key[:90]}")


if __name__ == "__main__":
    main()
