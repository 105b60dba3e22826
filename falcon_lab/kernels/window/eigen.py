"""falcon-3's μ_t: λ_max of each token's window Gram, by a Triton kernel on a GPU (W ≤ 4, fp32) or by eigvalsh."""

from __future__ import annotations

import torch
from torch import Tensor

# cuSOLVER's batched symmetric eigensolver fails beyond ~32k matrices per call (seen on an H200)
EIG_BATCH = 16384


def takes_triton_eigen(gram: Tensor) -> bool:
    """Whether ``top_eigenvalue`` takes the Triton kernel: float32 matrices of at most 4 × 4 on a GPU."""
    return gram.is_cuda and gram.shape[-1] <= 4 and gram.dtype == torch.float32


def top_eigenvalue(gram: Tensor) -> Tensor:
    """λ_max of a batch of small symmetric matrices ``[..., W, W]``: on a GPU for W ≤ 4 in float32 by the
    Triton Jacobi kernel (falcon_lab/kernels/window/triton_eig4.py), else by ``eigvalsh`` in slices it accepts."""
    if takes_triton_eigen(gram):
        from falcon_lab.kernels.window.triton_eig4 import top_eigenvalue_small

        return top_eigenvalue_small(gram)
    flat = gram.reshape(-1, *gram.shape[-2:])
    if flat.shape[0] <= EIG_BATCH:
        return torch.linalg.eigvalsh(flat)[..., -1].reshape(gram.shape[:-2])
    parts = [torch.linalg.eigvalsh(part)[..., -1] for part in flat.split(EIG_BATCH)]
    return torch.cat(parts).reshape(gram.shape[:-2])

