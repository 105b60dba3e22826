"""Falcon-3's two Triton parts against what they replace, at the packed addition shape, forward and backward.

    PYTHONPATH=. python records/device/bench_falcon3_parts.py [--rows 256] [--tokens 256] [--reps 20]

- μ_t: the top eigenvalue of every token's 4 × 4 window Gram (rows × tokens × 6 heads matrices, keys of 64
  channels): ``torch.linalg.eigvalsh`` in the slices falcon_lab/kernels/falcon/prepare.py gives it, against
  falcon_lab/kernels/falcon/triton_eig4.py;
- the window solve: one unit lower-triangular 64 × 64 system per chunk of 16 tokens and head, with 128
  right-hand sides: ``torch.linalg.solve_triangular`` against falcon_lab/kernels/falcon/triton_tril_inverse.py.

Prints each pair's time (CUDA-synchronised wall time per call, forward and backward) and their largest
differences. On a CPU run it under TRITON_INTERPRET=1 with small --rows and --tokens (a check of the script).
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import torch

from falcon_lab.kernels.window.eigen import EIG_BATCH
from falcon_lab.kernels.window.triton_eig4 import top_eigenvalue_small
from falcon_lab.kernels.window.triton_tril_inverse import unit_lower_solve


def eigvalsh_top(gram: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.linalg.eigvalsh(part)[..., -1] for part in gram.split(EIG_BATCH)])


def solve_triangular(system: torch.Tensor, rhs: torch.Tensor) -> torch.Tensor:
    return torch.linalg.solve_triangular(system, rhs, upper=False, unitriangular=True)


def timed(fn: Callable, inputs: list[torch.Tensor], reps: int, sync: Callable) -> tuple[float, list]:
    """ms per forward + backward of sum(fn(*inputs) * weight); the last output and the inputs' gradients."""
    leaves = [t.clone().requires_grad_(True) for t in inputs]
    weight = None
    for _ in range(2):
        out = fn(*leaves)
        weight = torch.randn(out.shape, generator=torch.Generator().manual_seed(0)).to(out.device)
        (out * weight).sum().backward()
    for t in leaves:
        t.grad = None
    sync()
    start = time.perf_counter()
    for _ in range(reps):
        for t in leaves:
            t.grad = None
        out = fn(*leaves)
        (out * weight).sum().backward()
    sync()
    return (time.perf_counter() - start) / reps * 1e3, [out.detach(), *(t.grad for t in leaves)]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rows", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    torch.manual_seed(0)
    heads = 6
    x = torch.randn(args.rows * args.tokens * heads, 4, 64, device=dev) / 8
    gram = x @ x.transpose(-1, -2)
    systems = args.rows * heads * (args.tokens // 16)
    # a step-scaled, decayed window Gram: strictly lower entries of order 0.1
    system = (torch.randn(systems, 64, 64, device=dev) * 0.1).tril(-1)
    rhs = torch.randn(systems, 64, 128, device=dev)
    name = torch.cuda.get_device_name() if dev == "cuda" else "cpu"
    print(f"device {name}; {gram.shape[0]} Grams of 4 x 4; {systems} systems of 64 x 64 with 128 right-hand sides")
    for what, old, new, inputs in (("top eigenvalue", eigvalsh_top, top_eigenvalue_small, [gram]),
                                   ("window solve", solve_triangular, unit_lower_solve, [system, rhs])):
        t_old, ref = timed(old, inputs, args.reps, sync)
        t_new, out = timed(new, inputs, args.reps, sync)
        diff = max((a - b).abs().max().item() / max(b.abs().max().item(), 1e-30) for a, b in zip(out, ref))
        print(f"{what}: {t_old:.2f} ms -> {t_new:.2f} ms forward + backward ({t_old / t_new:.1f}x); "
              f"largest difference {diff:.1e} of the largest value")


if __name__ == "__main__":
    main()
