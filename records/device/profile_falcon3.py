"""Where a falcon-3 layer's training step spends GPU time at the packed addition shape.

    PYTHONPATH=. python records/device/profile_falcon3.py [--batch 256] [--seq 256] [--rule falcon-3]

One mixer layer (d_model 384, 6 heads, the registry's defaults), bf16 autocast as in training, forward and
backward, after two warm-up passes; prints the GPU time per operator (torch.profiler), the top kernels and
the count of kernels launched.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.profiler import ProfilerActivity, profile

from falcon_lab.mixers import build_mixer


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--rule", default="falcon-3")
    args = ap.parse_args()
    dev = torch.device("cuda" if torch.cuda.is_available() else "cpu")  # the CPU: a check of the script
    torch.manual_seed(0)
    layer = build_mixer(args.rule, 384, 6).to(dev)
    x = torch.randn(args.batch, args.seq, 384, device=dev, requires_grad=True)

    def step() -> None:
        with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=dev.type == "cuda"):
            y = layer(x)
        y.float().square().mean().backward()

    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    for _ in range(2):
        step()
    sync()
    t = time.perf_counter()
    step()
    sync()
    print(f"{args.rule}: one layer, forward and backward, batch {args.batch} x {args.seq}: "
          f"{(time.perf_counter() - t) * 1e3:.1f} ms wall")
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if dev.type == "cuda" else [])
    with profile(activities=activities, record_shapes=True) as prof:
        step()
        sync()
    events = prof.key_averages()
    kernels = [e for e in events if e.device_type.name == "CUDA"]
    if dev.type == "cpu":
        print(events.table(sort_by="self_cpu_time_total", row_limit=10))
        return
    own = "self_device_time_total" if hasattr(events[0], "self_device_time_total") else "self_cuda_time_total"
    print(f"kernels launched: {sum(e.count for e in kernels)}; "
          f"GPU time {sum(getattr(e, own) for e in kernels) / 1e3:.1f} ms")
    print(events.table(sort_by=own, row_limit=30, max_name_column_width=70))
    print(prof.key_averages(group_by_input_shape=True).table(sort_by=own.replace("self_", ""), row_limit=25,
                                                             max_name_column_width=40, max_shapes_column_width=80))


if __name__ == "__main__":
    main()
