"""μ_t of a falcon-3 layer at the packed addition shape: cuSOLVER's eigvalsh against the Triton Jacobi kernel.

    PYTHONPATH=. python results/device/bench_eig4.py [--n 393216] [--reps 20]

Window Grams of 4 keys of 64 channels (256 rows × 256 tokens × 6 heads = 393,216 a layer by default), float32:
the top eigenvalue, forward and backward, by ``torch.linalg.eigvalsh`` in the slices kernels/falcon/prepare.py
gives it and by kernels/falcon/triton_eig4.py; prints both times and their largest difference. On a CPU run it
under TRITON_INTERPRET=1 with a small --n (a check of the script).
"""

from __future__ import annotations

import argparse
import time

import torch

from kernels.falcon.prepare import EIG_BATCH
from kernels.falcon.triton_eig4 import top_eigenvalue_small


def eigvalsh_top(gram: torch.Tensor) -> torch.Tensor:
    return torch.cat([torch.linalg.eigvalsh(part)[..., -1] for part in gram.split(EIG_BATCH)])


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=393216)
    ap.add_argument("--reps", type=int, default=20)
    args = ap.parse_args()
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
    torch.manual_seed(0)
    x = torch.randn(args.n, 4, 64, device=dev)
    gram = x @ x.transpose(-1, -2)
    weight = torch.randn(args.n, device=dev)
    results = {}
    for name, fn in (("eigvalsh", eigvalsh_top), ("triton", top_eigenvalue_small)):
        g = gram.clone().requires_grad_(True)
        for _ in range(2):
            (fn(g) * weight).sum().backward()
        sync()
        start = time.perf_counter()
        for _ in range(args.reps):
            lam = fn(g)
            (lam * weight).sum().backward()
        sync()
        results[name] = ((time.perf_counter() - start) / args.reps * 1e3, lam.detach(), g.grad / (args.reps + 2))
    (t_ref, lam_ref, grad_ref), (t_new, lam_new, grad_new) = results["eigvalsh"], results["triton"]
    print(f"device {torch.cuda.get_device_name() if dev == 'cuda' else 'cpu'}; {args.n} matrices of 4 x 4")
    print(f"eigvalsh: {t_ref:.2f} ms forward + backward; triton: {t_new:.2f} ms ({t_ref / t_new:.1f}x)")
    rel = ((lam_new - lam_ref).abs() / lam_ref.abs().clamp_min(1e-6)).max().item()
    print(f"largest relative difference of λ_max {rel:.2e}; of the gradient {(grad_new - grad_ref).abs().max().item():.2e}")


if __name__ == "__main__":
    main()
