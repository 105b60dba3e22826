"""The chunk-parallel form of falcon-3 (paper Algorithm 3, appendix H), in pure PyTorch.

Three phases over chunks of C tokens, with chunk-local log-prefix decays (restarted in every chunk):
1. in parallel over chunks, the block-strict-causal solve of size C·W (``falcon_lab.kernels.window.solve``) applied to two
   right-hand sides, so each chunk's pseudo-values are affine in its entry state: ``u = U0 − Wm S_in``;
   this gives the chunk's affine map ``S_out = M S_in + b``;
2. a short sequential pass of the chunk maps gives every chunk's entry state;
3. in parallel over chunks, the pseudo-values and the outputs.
Each token's window reaches W − 1 pairs back, across the chunk boundary and into the state's tail: the
window stacks are gathered from the extended pairs before chunking. The last chunk may be short: it is
padded with tokens that write nothing and carry the state unchanged (η = 0, log γ = 0).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.prepare import final_state, prepare
from falcon_lab.kernels.common.state import FastWeightState
from falcon_lab.kernels.window.eigen import top_eigenvalue
from falcon_lab.kernels.window.solve import block_read, exit_weights, previous, solve_pseudo_values, window_inputs


def _chunked(t: Tensor, chunk: int, dims: int) -> Tensor:
    """``[B, H, T, *rest]`` -> ``[B, H, M, C, *rest]`` padding time with zeros to a multiple of C
    (``dims`` = how many trailing dims follow time)."""
    T = t.shape[2]
    pad = -T % chunk
    if pad:
        t = F.pad(t, (0, 0) * dims + (0, pad))
    return t.unflatten(2, (t.shape[2] // chunk, chunk))


def chunk_falcon3(q: Tensor, k: Tensor, v: Tensor, beta: Tensor, lam: Tensor, cfg: RuleConfig,
                  state: FastWeightState, fresh: bool, chunk_size: int = 64) -> tuple[Tensor, FastWeightState]:
    """Falcon-3 over ``[B, T, H, D]`` inputs, chunk by chunk. Returns (o ``[B, T, H, Dv]``, final state)."""
    if not (cfg.windowed and cfg.regression):
        raise ValueError(f"chunk_falcon3 runs rule 'falcon-3' only, got {cfg.rule!r}")
    T, Dv = q.shape[1], v.shape[-1]
    prep = prepare(k, v, beta, lam, cfg, state, fresh, top_eigenvalue)
    win = window_inputs(prep, cfg.span)
    C = min(chunk_size, T)
    xw, vw = _chunked(win.xw, C, 2), _chunked(win.vw, C, 2)  # [B, H, M, C, W, D]
    a, log_gamma = _chunked(win.a, C, 0), _chunked(win.log_gamma, C, 0)  # [B, H, M, C]
    qc = _chunked(q.transpose(1, 2), C, 1)  # [B, H, M, C, Dk]
    g = torch.cumsum(log_gamma, dim=-1)  # chunk-local log-prefix of the carries

    # Phase 1: u = U0 − Wm S_in for every chunk at once, and the chunk's affine map S_out = M S_in + b.
    entry = torch.exp(previous(g))[..., None, None]
    rhs = a[..., None, None] * torch.cat([vw, entry * xw], dim=-1)
    sol = solve_pseudo_values(xw, a, g, rhs)  # [B, H, M, C·W, Dv + Dk]
    U0, Wm = sol.split([Dv, sol.shape[-1] - Dv], dim=-1)  # split, not two slices: one gradient buffer
    to_exit = exit_weights(xw, g).transpose(-1, -2)  # [B, H, M, Dk, C·W]
    eye = torch.eye(Wm.shape[-1], dtype=Wm.dtype, device=Wm.device)
    M_map = torch.exp(g[..., -1])[..., None, None] * eye - to_exit @ Wm
    b_map = to_exit @ U0

    # Phase 2: the entry state of every chunk (sequential over chunks, Dk×Dk by Dk×Dv per step).
    # unbind, not M_map[:, :, m]: each indexing's backward writes a zero tensor of the whole M_map (O(M²))
    S = state.S
    entries = []
    for M_m, b_m in zip(M_map.unbind(2), b_map.unbind(2)):
        entries.append(S)
        S = M_m @ S + b_m
    S_in = torch.stack(entries, dim=2)  # [B, H, M, Dk, Dv]

    # Phase 3: pseudo-values and outputs of every chunk at once.
    u = U0 - Wm @ S_in
    o = block_read(qc, xw, u, g, S_in, raw=cfg.timing == "raw")  # [B, H, M, C, Dv]
    o = o.flatten(2, 3)[:, :, :T].transpose(1, 2)
    return o, final_state(S, k, prep, cfg)
