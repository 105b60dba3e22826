"""Forward and backward of one mixer layer on the CPU, one thread: the median of five after one warm-up.

    PYTHONPATH=. python records/bench/chunk_loops_cpu/layer_time.py MIXER [T]

d_model 384, 6 heads, batch 1, T positions (default 256), the registry's options (the chunk forms on a CPU).
"""

from __future__ import annotations

import sys
import time

import torch

from falcon_lab.mixers import build_mixer


def main() -> None:
    name = sys.argv[1]
    T = int(sys.argv[2]) if len(sys.argv) > 2 else 256
    torch.manual_seed(0)
    torch.set_num_threads(1)
    layer = build_mixer(name, 384, 6)
    x = torch.randn(1, T, 384, requires_grad=True)

    def once() -> float:
        start = time.perf_counter()
        layer(x).sum().backward()
        return time.perf_counter() - start

    once()
    times = sorted(once() for _ in range(5))
    print(f"{name}: T = {T}, forward and backward {times[2]:.3f} s (median of 5)")


if __name__ == "__main__":
    main()
