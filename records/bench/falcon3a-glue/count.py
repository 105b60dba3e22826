"""What falcon-3a's fused path writes in PyTorch around its Triton kernels: every ATen operation and the bytes of
every tensor it returns, forward and backward, at 8 x 2048 x 12 x 64 (bf16 inputs, window 4), on the CPU. The two
kernels (the delayed pass and the band) are replaced by stand-ins that write one output each, so only the
surrounding PyTorch is counted; `--band pytorch` puts the band back as the PyTorch sum it was before
`falcon_lab/kernels/window/triton_band.py`. Views are counted as operations and their bytes as written (an upper bound).

    TRITON_INTERPRET=1 python records/bench/falcon3a-glue/count.py [--band pytorch]
"""

from __future__ import annotations

import argparse
import collections

import torch
from torch.utils._python_dispatch import TorchDispatchMode

import falcon_lab.kernels.window.fused as fused
from falcon_lab.kernels import fast_weight_rule


class Count(TorchDispatchMode):
    def __init__(self) -> None:
        super().__init__()
        self.ops: collections.Counter = collections.Counter()
        self.bytes = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        self.ops[func.overloadpacket.__name__] += 1
        for t in out if isinstance(out, (tuple, list)) else [out]:
            if isinstance(t, torch.Tensor):
                self.bytes += t.numel() * t.element_size()
        return out


def band_in_pytorch(q, x, y, coef, lag):
    T, W = q.shape[1], coef.shape[-1] + 1
    o = 0.0
    for d in range(W - 1):
        start = W - 1 - d - lag
        o = o + (coef[..., d] * (x[:, start:start + T] * q.float()).sum(-1))[..., None] * y[:, start:start + T]
    return o


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--band", choices=["kernel", "pytorch"], default="kernel")
    args = parser.parse_args()
    fused.decayed_attention = lambda q, k, v, eta, lg, S0, raw, chunk_size: ((q * eta[..., None]).to(q.dtype),
                                                                             S0.clone())
    fused.band_read = (band_in_pytorch if args.band == "pytorch"
                       else lambda q, x, y, coef, lag: y[:, :q.shape[1]] * coef[..., :1])
    B, T, H, D = 8, 2048, 12, 64
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, T, H, D, generator=g).bfloat16().requires_grad_() for _ in range(3))
    beta, lam = (torch.rand(B, T, H, generator=g).requires_grad_() for _ in range(2))
    count = Count()
    with count:
        o, _ = fast_weight_rule(q, k, v, beta=beta, lam=lam, rule="falcon-3a", window=4, backend="triton",
                                output_final_state=True)
        fwd_ops, fwd_bytes = sum(count.ops.values()), count.bytes
        o.float().sum().backward()
    print(f"band {args.band}: forward {fwd_ops} operations, {fwd_bytes / 1e9:.2f} GB; forward and backward "
          f"{sum(count.ops.values())} operations, {count.bytes / 1e9:.2f} GB")
    print("most frequent:", ", ".join(f"{name} {n}" for name, n in count.ops.most_common(12)))


if __name__ == "__main__":
    main()
