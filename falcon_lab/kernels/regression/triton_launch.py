"""Host side of the regression kernels: layouts, block sizes, and the forward/backward launch sequences."""

from __future__ import annotations

import os

import torch
import triton
from torch import Tensor

from falcon_lab.kernels.common import packed
from falcon_lab.kernels.common import triton_helpers as helpers
from falcon_lab.kernels.common.checks import SettingError, env_setting, interpreting, setting
from falcon_lab.kernels.common.config import RuleConfig
from falcon_lab.kernels.common.triton_helpers import chunk_table, next_power_of_2
from falcon_lab.kernels.regression.triton_dk import finish_dk_kernel
from falcon_lab.kernels.regression.triton_f1 import f1_intra_kernel, f1_prep_kernel, f1_state_kernel
from falcon_lab.kernels.regression.triton_f1_bwd import f1_dstate_kernel, f1_grad_kernel
from falcon_lab.kernels.regression.triton_f2 import f2_dstate_kernel, f2_fwd_kernel, f2_inverse_kernel, f2_out_kernel
from falcon_lab.kernels.regression.triton_f2_bwd import f2_grad_kernel

# The matmul operands inside the kernels, by input dtype, on a GPU: "tf32x3" (three tf32 passes, about fp32),
# "tf32" (one pass) or "bf16" (operands rounded to bf16, the fastest). bf16 inputs take bf16 operands: their
# error against the float64 reference stays that of bf16 inputs. The interpreter multiplies in exact fp32.
MATMUL_PRECISION = {torch.float32: "tf32x3", torch.bfloat16: "bf16", torch.float16: "tf32x3"}
# The UT transform's inverse, by input dtype: its blocked products feed every later one, so fp32 and fp16
# inputs keep about fp32 ("tf32x3"); for bf16 inputs bf16 operands hold the same error as the other two.
# The errors and times of the three: records/bench/gpu_check_regression.md (`lab bench gpu-check` remakes them).
SOLVE_PRECISION = {torch.float32: "tf32x3", torch.bfloat16: "bf16", torch.float16: "tf32x3"}
# How the UT transform's inverse is formed (``triton_f1.unit_lower_inverse``): "substitution" (row by row in blocks of
# 16, then their merge: 19 dependent products at a chunk of 64) or "doubling" (blocks of 2, 4, ... inverted
# together: 10; f1_prep 3.74 -> 3.54 ms of falcon-1.3's same-time step on an H200, records/bench/conv-forms);
# LAB_TRIL_INVERSE in the environment sets it, so one machine times either.
INVERSES = ("substitution", "doubling")


def inverse(text: str) -> str:
    """The UT inverse named by ``text``; SettingError for what is not one."""
    return setting("the UT inverse", text, INVERSES)


INVERSE = env_setting("LAB_TRIL_INVERSE", "doubling", inverse)
KERNELS = ("f1_prep", "f1_intra", "f1_state", "f1_dstate", "f1_grad", "f2_fwd", "f2_dstate", "f2_inverse", "f2_out",
           "f2_grad", "finish_dk", "f3_prep", "f3_state", "f3_read", "f3_dstate", "f3_grad")  # f3_*: falcon-3's
LAUNCH_KEYS = ("BK", "BV", "num_warps", "num_stages")


def parse_launch(text: str) -> dict[str, dict]:
    """``kernel:KEY=N,KEY=N;kernel:...`` (LAB_LAUNCH) as ``LAUNCH_OVERRIDES`` takes it; SettingError for a kernel
    or key that is not one, or a value that is no positive integer."""
    overrides: dict[str, dict] = {}
    for part in filter(None, (p.strip() for p in text.split(";"))):
        name, _, settings = part.partition(":")
        if name not in KERNELS:
            raise SettingError(f"LAB_LAUNCH: unknown kernel {name!r} (one of {', '.join(KERNELS)})")
        for setting in filter(None, settings.split(",")):
            key, _, value = setting.partition("=")
            if key not in LAUNCH_KEYS or not value.isdigit() or int(value) < 1:
                raise SettingError(f"LAB_LAUNCH: {name}: expected KEY=N with KEY one of {', '.join(LAUNCH_KEYS)} "
                                  f"and N a positive integer, got {setting!r}")
            overrides.setdefault(name, {})[key] = int(value)
    return overrides


# kernel name -> block sizes / warps replacing ``launch_config``'s (for tuning sweeps; LAB_LAUNCH in the environment,
# ``parse_launch``'s form, sets them for a process, so one machine times a step at either)
LAUNCH_OVERRIDES: dict[str, dict] = parse_launch(os.environ.get("LAB_LAUNCH", ""))
# Keep the forward's chunk quantities for the backward (True), or recompute them there (False, as fla does).
# Kept: falcon-1's UT-transform outputs (A, η, G, g: C + 3 floats per token and head), its pseudo-values U
# (Dv floats) and the chunk entry states h (Dk·Dv/C floats per token and head); falcon-2's U and h. The
# backward then skips a second UT transform and state pass (falcon-1), or a second sequential solve
# (falcon-2). At Dk = Dv = 128 the kept tensors take about 2.4 times the memory of bf16 q, k, v for
# falcon-1 (chunks of 64) and 6 times for falcon-2 (chunks of 16, so four times as many entry states).
KEEP_FOR_BACKWARD = True
F2_CHUNK = 16  # falcon-2's chunk: its per-column decay tiles are [16, 16, BV]
# How falcon-2's per-column solve runs (F2_SOLVE, read when a call's Layout is made, so its backward solves as its
# forward did); all three are exact, and lab bench kernels times them side by side. The inverses are the default
# since they passed the float64 check on an H100 at D = 64 and 128 in fp32 and bf16
# (records/bench/gpu-checks-2026-12-05) and ran fwd+bwd 1.08x and 1.37x faster than the substitution at D = 128
# (records/bench/kernels-2026-12-05):
#   "sequential"     the state pass walks each chunk's 16-step substitution and writes the outputs too;
#   "outputs-apart"  the same substitution, the outputs from a parallel pass over the chunks after it;
#   "inverses"       a parallel pass forms every chunk's per-column inverses [16, 16, Dv] first (fp32: 64 floats a
#                    token, head and value column, held for the call), the state pass applies them as one product
#                    and the outputs come from the parallel pass; the backward's reverse pass applies the
#                    transposed inverses.
F2_SOLVES = ("sequential", "outputs-apart", "inverses")
F2_SOLVE = "inverses"


class Layout:
    """Where the sequences and their chunks lie: a batch of B sequences of T tokens, or packed ones; or B rows of
    samples told apart by ``sample_id [B, T]`` (int32, non-decreasing along a row), in the batch's chunks."""

    def __init__(self, q: Tensor, cu_seqlens: Tensor | None, C: int, sample_id: Tensor | None = None):
        B, T, H, _ = q.shape
        self.samples = sample_id is not None
        self.sid = q if sample_id is None else sample_id  # never read without samples
        self.T, self.H, self.C = T, H, C
        if F2_SOLVE not in F2_SOLVES:
            raise ValueError(f"F2_SOLVE={F2_SOLVE!r}; accepted: {', '.join(F2_SOLVES)}")
        self.f2_solve = F2_SOLVE  # taken at the forward, so its backward solves the same way
        self.varlen = cu_seqlens is not None
        if cu_seqlens is None:
            self.N, self.NT = B, triton.cdiv(T, C)
            self.n_chunks = B * self.NT
            self.cu = self.cidx = self.coff = q  # never read: the kernels compute the offsets
        else:
            self.cidx, self.coff = chunk_table(cu_seqlens, C)
            self.N, self.NT = cu_seqlens.numel() - 1, 0
            self.n_chunks = self.cidx.shape[0]
            self.cu = packed.as_int32(cu_seqlens, cu_seqlens.device)


def precision(dtype: torch.dtype) -> str:
    return "ieee" if interpreting() else MATMUL_PRECISION[dtype]


def solve_precision(dtype: torch.dtype) -> str:
    """The precision of the UT transform's inverse for inputs of `dtype` (SOLVE_PRECISION)."""
    return "ieee" if interpreting() else SOLVE_PRECISION[dtype]


def launch_config(kernel: str, Dk: int, Dv: int, C: int) -> dict:
    """Block sizes and warps of each kernel: what fits the registers and the 227 KB of shared memory of a
    Hopper SM at Dk, Dv ≤ 256 (checked by compiling for sm_90)."""
    return {**_default_config(kernel, Dk, Dv, C), **LAUNCH_OVERRIDES.get(kernel, {})}


def _default_config(kernel: str, Dk: int, Dv: int, C: int) -> dict:
    BK, BV = min(64, next_power_of_2(Dk)), min(64, next_power_of_2(Dv))
    BKf = next_power_of_2(Dk)  # the sequential passes hold the whole key width of the state
    wide = BKf > 64
    if kernel in ("f1_prep", "f1_intra"):
        return dict(BK=BK, BV=BV, num_warps=8 if C == 64 else 4)
    if kernel in ("f1_state", "f1_dstate"):
        return dict(BK=BKf, BV=min(next_power_of_2(Dv), 64 if not wide else 32 if BKf <= 128 else 16),
                    num_warps=8 if wide or C == 64 else 4)
    if kernel == "f1_grad":
        return dict(BK=32 if wide else BK, BV=min(32, BV), num_warps=8 if C == 64 else 4)
    if kernel in ("f2_fwd", "f2_dstate", "f2_inverse", "f2_out"):
        return dict(BK=BKf, BV=min(next_power_of_2(Dv), 32 if BKf <= 128 else 16), num_warps=8 if wide else 4)
    if kernel == "f2_grad":
        return dict(BK=BKf, BV=16, num_warps=8 if wide else 4)
    if kernel == "finish_dk":
        return dict(BK=BK, num_warps=4)
    raise ValueError(f"no launch configuration for kernel {kernel!r}")


def _f32(*shape: int, device: torch.device) -> Tensor:
    return helpers.new_buffer(*shape, dtype=torch.float32, device=device)


def _like(t: Tensor) -> Tensor:
    return helpers.new_buffer(*t.shape, dtype=t.dtype, device=t.device)


def _flags(cfg: RuleConfig, fresh: bool, lay: Layout, prec: str) -> dict:
    return dict(H=lay.H, C=lay.C, SHIFTED=cfg.shifted, FRESH=fresh, IS_VARLEN=lay.varlen, PREC=prec)


def _gate_flags(cfg: RuleConfig) -> dict:
    return dict(NORMALIZE=cfg.normalize, COUPLED=cfg.scale_coupled_ridge)


def _samples(lay: Layout) -> dict:
    """The regression kernels' flag of rows of samples (``Layout.sid`` is passed beside the packed tables)."""
    return dict(SAMPLES=lay.samples)


def _f1_chunks(k, v, beta, lam, lk, cfg, fresh, lay, prec):
    """The UT transform of every chunk: A, W, Ũ and the per-token η, G, g (fp32)."""
    rows, Dk, Dv, dev = k.shape[0] * k.shape[1], k.shape[-1], v.shape[-1], k.device
    A = _f32(rows, lay.H, lay.C, device=dev)
    # W only ever enters matmuls: with bf16 operands it is stored in bf16
    W = helpers.new_buffer(rows, lay.H, Dk, dtype=torch.bfloat16 if prec == "bf16" else torch.float32, device=dev)
    Ut = _f32(rows, lay.H, Dv, device=dev)
    eta, G, g = (_f32(rows, lay.H, device=dev) for _ in range(3))
    f1_prep_kernel[(lay.n_chunks, lay.H)](
        k, v, beta, lam, lk, lay.cu, lay.cidx, lay.sid, A, W, Ut, eta, G, g, lay.T, lay.NT, cfg.eps,
        cfg.decay_floor, Dk=Dk, Dv=Dv, SOLVE_PREC=solve_precision(k.dtype), GATED_DELTA=cfg.gated_delta,
        DOUBLING=INVERSE == "doubling", **_flags(cfg, fresh, lay, prec), **_samples(lay), **_gate_flags(cfg),
        **launch_config("f1_prep", Dk, Dv, lay.C))
    return A, W, Ut, eta, G, g


def _f1_states(k, lk, W, Ut, G, S0, cfg, fresh, lay, prec):
    """The state pass: U, the final state and every chunk's entry state."""
    rows, Dk, Dv, dev = k.shape[0] * k.shape[1], k.shape[-1], Ut.shape[-1], k.device
    U = _f32(rows, lay.H, Dv, device=dev)
    Sf = _f32(lay.N, lay.H, Dk, Dv, device=dev)
    h = _f32(lay.n_chunks, lay.H, Dk, Dv, device=dev)
    conf = launch_config("f1_state", Dk, Dv, lay.C)
    f1_state_kernel[(triton.cdiv(Dv, conf["BV"]), lay.N * lay.H)](
        k, lk, W, Ut, G, S0, lay.cu, lay.coff, lay.sid, h, U, Sf, lay.T, Dk=Dk, Dv=Dv, STORE_H=True,
        **_flags(cfg, fresh, lay, prec), **_samples(lay), **conf)
    return U, Sf, h


def _f1_intra(q, k, lk, h, src, G, g, out, cfg, fresh, lay, prec, backward):
    Dk, Dv = k.shape[-1], src.shape[-1]
    conf = launch_config("f1_intra", Dk, Dv, lay.C)
    f1_intra_kernel[(triton.cdiv(Dv, conf["BV"]), lay.n_chunks, lay.H)](
        q, k, lk, h, src, G, g, lay.cu, lay.cidx, lay.sid, out, lay.T, lay.NT, Dk=Dk, Dv=Dv,
        RBW=cfg.timing == "rbw", BACKWARD=backward, **_flags(cfg, fresh, lay, prec), **_samples(lay), **conf)


def f1_forward(q, k, v, beta, lam, S0, lk, cfg, fresh, lay, keep=False):
    """(o, final S, kept): kept is (A, η, G, g, U, h) for the backward when ``keep``, else ()."""
    prec = precision(q.dtype)
    A, W, Ut, eta, G, g = _f1_chunks(k, v, beta, lam, lk, cfg, fresh, lay, prec)
    U, Sf, h = _f1_states(k, lk, W, Ut, G, S0, cfg, fresh, lay, prec)
    del W, Ut
    o = helpers.new_buffer(*v.shape, dtype=q.dtype, device=q.device)
    _f1_intra(q, k, lk, h, U, G, g, o, cfg, fresh, lay, prec, backward=False)
    return o, Sf, ((A, eta, G, g, U, h) if keep else ())


def f1_backward(q, k, v, beta, lam, S0, lk, do, dSf, cfg, fresh, lay, kept=()):
    prec = precision(q.dtype)
    rows, Dk, Dv, dev = k.shape[0] * k.shape[1], k.shape[-1], v.shape[-1], k.device
    if kept:
        A, eta, G, g, U, h = kept
    else:
        A, W, Ut, eta, G, g = _f1_chunks(k, v, beta, lam, lk, cfg, fresh, lay, prec)
        U, _, h = _f1_states(k, lk, W, Ut, G, S0, cfg, fresh, lay, prec)
        del W, Ut
    dul = _f32(rows, lay.H, Dv, device=dev)
    _f1_intra(q, k, lk, h, do, G, g, dul, cfg, fresh, lay, prec, backward=True)
    dh = _f32(*h.shape, device=dev)
    dB = _f32(rows, lay.H, Dv, device=dev)
    dS0 = _f32(*S0.shape, device=dev)
    conf = launch_config("f1_dstate", Dk, Dv, lay.C)
    f1_dstate_kernel[(triton.cdiv(Dv, conf["BV"]), lay.N * lay.H)](
        q, k, lk, do, dul, A, eta, G, g, dSf if dSf is not None else dS0, lay.cu, lay.coff, lay.sid, dh, dB, dS0,
        lay.T, Dk=Dk, Dv=Dv, RBW=cfg.timing == "rbw", HAS_DSF=dSf is not None, GATED_DELTA=cfg.gated_delta,
        **_flags(cfg, fresh, lay, prec), **_samples(lay), **conf)
    del dul, A
    dq, dv, dbeta, dlam = _like(q), _like(v), _like(beta), _like(lam)
    dx = _f32(rows, lay.H, Dk, device=dev)
    de = _f32(rows, lay.H, device=dev)
    f1_grad_kernel[(lay.n_chunks, lay.H)](
        q, k, v, beta, lam, lk, do, U, dB, h, dh, lay.cu, lay.cidx, lay.sid, dq, dx, dv, dbeta, dlam, de, lay.T,
        lay.NT, cfg.eps, cfg.decay_floor, Dk=Dk, Dv=Dv, RBW=cfg.timing == "rbw", GATED_DELTA=cfg.gated_delta,
        **_gate_flags(cfg), **_flags(cfg, fresh, lay, prec), **_samples(lay),
        **launch_config("f1_grad", Dk, Dv, lay.C))
    dk, dlk = finish_dk(k, lk, dx, de, cfg, fresh, lay)
    return dq, dk, dv, dbeta, dlam, dS0, dlk


def _f2_inverses(k, v, beta, lam, lk, cfg, fresh, lay, prec):
    """Every chunk's per-column inverses (I + L_j)⁻¹, ``[chunks, H, C, C, Dv]`` fp32."""
    Dk, Dv = k.shape[-1], v.shape[-1]
    Ti = _f32(lay.n_chunks, lay.H, lay.C, lay.C, Dv, device=k.device)
    conf = launch_config("f2_inverse", Dk, Dv, lay.C)
    f2_inverse_kernel[(lay.n_chunks, lay.H, triton.cdiv(Dv, conf["BV"]))](
        k, v, beta, lam, lk, lay.cu, lay.cidx, lay.sid, Ti, lay.T, lay.NT, cfg.eps, cfg.decay_floor, Dk=Dk, Dv=Dv,
        **_gate_flags(cfg), **_flags(cfg, fresh, lay, prec), **_samples(lay), **conf)
    return Ti


def _f2_states(q, k, v, beta, lam, S0, lk, cfg, fresh, lay, prec, write_o, store):
    """The sequential falcon-2 pass: the outputs (``write_o``) and/or U and every chunk's entry state
    (``store``). ``F2_SOLVE`` other than "sequential": the outputs come from a parallel pass after the sequential
    one (so U and the entry states are always stored); "inverses": the sequential pass applies the per-column
    inverses of a parallel pass before it."""
    rows, Dk, Dv, dev = k.shape[0] * k.shape[1], k.shape[-1], v.shape[-1], k.device
    inverse, apart = lay.f2_solve == "inverses", lay.f2_solve != "sequential"
    store = store or apart
    Sf = _f32(lay.N, lay.H, Dk, Dv, device=dev)
    o = helpers.new_buffer(*v.shape, dtype=q.dtype, device=dev) if write_o else Sf
    U = _f32(rows, lay.H, Dv, device=dev) if store else Sf
    h = _f32(lay.n_chunks, lay.H, Dk, Dv, device=dev) if store else Sf
    Ti = _f2_inverses(k, v, beta, lam, lk, cfg, fresh, lay, prec) if inverse else Sf
    conf = launch_config("f2_fwd", Dk, Dv, lay.C)
    f2_fwd_kernel[(triton.cdiv(Dv, conf["BV"]), lay.N * lay.H)](
        q, k, v, beta, lam, lk, S0, lay.cu, lay.coff, lay.sid, Ti, o, U, h, Sf, lay.T, cfg.eps, cfg.decay_floor,
        Dk=Dk, Dv=Dv, RBW=cfg.timing == "rbw", WRITE_O=write_o and not apart, STORE=store, INVERSE=inverse,
        **_gate_flags(cfg), **_flags(cfg, fresh, lay, prec), **_samples(lay), **conf)
    if write_o and apart:
        conf = launch_config("f2_out", Dk, Dv, lay.C)
        f2_out_kernel[(lay.n_chunks, lay.H, triton.cdiv(Dv, conf["BV"]))](
            q, k, v, beta, lam, lk, U, h, lay.cu, lay.cidx, lay.sid, o, lay.T, lay.NT, cfg.eps, cfg.decay_floor,
            Dk=Dk, Dv=Dv, RBW=cfg.timing == "rbw", **_gate_flags(cfg), **_flags(cfg, fresh, lay, prec),
            **_samples(lay), **conf)
    return o, Sf, U, h


def f2_forward(q, k, v, beta, lam, S0, lk, cfg, fresh, lay, keep=False):
    """(o, final S, kept): kept is (U, h) for the backward when ``keep``, else ()."""
    o, Sf, U, h = _f2_states(q, k, v, beta, lam, S0, lk, cfg, fresh, lay, precision(q.dtype), write_o=True,
                             store=keep)
    return o, Sf, ((U, h) if keep else ())


def f2_backward(q, k, v, beta, lam, S0, lk, do, dSf, cfg, fresh, lay, kept=()):
    prec = precision(q.dtype)
    rows, Dk, Dv, dev = k.shape[0] * k.shape[1], k.shape[-1], v.shape[-1], k.device
    if kept:
        U, h = kept
    else:
        _, _, U, h = _f2_states(q, k, v, beta, lam, S0, lk, cfg, fresh, lay, prec, write_o=False, store=True)
    inverse = lay.f2_solve == "inverses"
    dh = _f32(*h.shape, device=dev)
    dB = _f32(rows, lay.H, Dv, device=dev)
    dS0 = _f32(*S0.shape, device=dev)
    Ti = _f2_inverses(k, v, beta, lam, lk, cfg, fresh, lay, prec) if inverse else dS0
    common = dict(Dk=Dk, Dv=Dv, RBW=cfg.timing == "rbw", **_gate_flags(cfg), **_flags(cfg, fresh, lay, prec),
                  **_samples(lay))
    conf = launch_config("f2_dstate", Dk, Dv, lay.C)
    f2_dstate_kernel[(triton.cdiv(Dv, conf["BV"]), lay.N * lay.H)](
        q, k, v, beta, lam, lk, do, U, dSf if dSf is not None else dS0, lay.cu, lay.coff, lay.sid, Ti, dh, dB, dS0,
        lay.T,
        cfg.eps, cfg.decay_floor, HAS_DSF=dSf is not None, INVERSE=inverse, **common, **conf)
    dq, dv, dbeta, dlam = _like(q), _like(v), _like(beta), _like(lam)
    dx = _f32(rows, lay.H, Dk, device=dev)
    de = _f32(rows, lay.H, device=dev)
    f2_grad_kernel[(lay.n_chunks, lay.H)](
        q, k, v, beta, lam, lk, do, U, dB, h, dh, lay.cu, lay.cidx, lay.sid, dq, dx, dv, dbeta, dlam, de, lay.T,
        lay.NT,
        cfg.eps, cfg.decay_floor, **common, **launch_config("f2_grad", Dk, Dv, lay.C))
    dk, dlk = finish_dk(k, lk, dx, de, cfg, fresh, lay)
    return dq, dk, dv, dbeta, dlam, dS0, dlk


def finish_dk(k: Tensor, lk: Tensor, dx: Tensor, de: Tensor, cfg: RuleConfig, fresh: bool,
              lay: Layout) -> tuple[Tensor, Tensor]:
    """dk (and the state's last key's gradient) from dx and dE, on the layout's chunks."""
    Dk = k.shape[-1]
    dk = torch.zeros_like(k)  # shifted: the last key of a sequence writes no pair in it
    dlk = torch.zeros_like(lk)
    finish_dk_kernel[(lay.n_chunks, lay.H)](
        k, lk, dx, de, lay.cu, lay.cidx, lay.sid, dk, dlk, lay.T, lay.NT, H=lay.H, Dk=Dk, BT=lay.C,
        SHIFTED=cfg.shifted, FRESH=fresh, IS_VARLEN=lay.varlen, SAMPLES=lay.samples,
        **launch_config("finish_dk", Dk, Dk, lay.C))
    return dk, dlk
