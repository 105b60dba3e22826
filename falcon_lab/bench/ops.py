"""The operations the kernel benchmark times: the Falcon rules' Triton kernels and their anchors.

Each op makes one set of random inputs for a shape ``(B, T, H, D)`` (Dk = Dv = D) and calls the op on a set.
Ops whose code is absent (a kernel not built yet, fla not installed) say why instead of running.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from functools import partial
from typing import Callable, NamedTuple

import torch
import torch.nn.functional as F
from torch import Tensor

from falcon_lab.kernels import RuleSpec, rule_spec, rule_specs

Shape = tuple[int, int, int, int]
CHUNK = 64


class Op(NamedTuple):
    """name: the row label; family: which FLOP count applies (see ``falcon_lab.bench.kernels``); missing(): None when
    the op can run, else why not; make(shape, dtype, seed): the input leaves; call(inputs): the output."""

    name: str
    family: str
    missing: Callable[[], str | None]
    make: Callable[[Shape, torch.dtype, int], dict[str, Tensor]]
    call: Callable[[dict[str, Tensor]], Tensor]
    anchor: bool = False
    refuses: Callable[[str], str | None] | None = None  # refuses(mode): why the op would refuse that mode, if it would
    rule: str | None = None  # the registered rule a row times (None: an anchor)
    lam_positive: bool = True  # the row's ridge: λ > 0, or λ = 0


def _gen(seed: int) -> torch.Generator:
    return torch.Generator(device="cuda").manual_seed(seed)


def _qkv(shape: Shape, dtype: torch.dtype, seed: int) -> dict[str, Tensor]:
    """q, k with unit-norm rows (as QK-ℓ2 gives), v standard normal; [B, T, H, D]."""
    B, T, H, D = shape
    g = _gen(seed)
    q = F.normalize(torch.randn(B, T, H, D, device="cuda", generator=g), dim=-1)
    k = F.normalize(torch.randn(B, T, H, D, device="cuda", generator=g), dim=-1)
    v = torch.randn(B, T, H, D, device="cuda", generator=g)
    return {"q": q.to(dtype), "k": k.to(dtype), "v": v.to(dtype)}


def _uniform(shape: tuple[int, ...], lo: float, hi: float, dtype: torch.dtype, g: torch.Generator) -> Tensor:
    return (lo + (hi - lo) * torch.rand(*shape, device="cuda", generator=g)).to(dtype)


def _module_missing(module: str, what: str) -> Callable[[], str | None]:
    def missing() -> str | None:
        try:
            found = importlib.util.find_spec(module) is not None
        except ModuleNotFoundError:
            found = False
        return None if found else what
    return missing


# falcon-2's rows, one a form of its per-column solve (falcon_lab.kernels.regression.triton_launch.F2_SOLVE): "falcon-2" is
# the default, the per-column inverses (before 2026-12-05 the rows named "falcon-2" timed the substitution)
F2_FORMS = {"falcon-2": "inverses", "falcon-2 outputs apart": "outputs-apart", "falcon-2 substitution": "sequential"}
# Gated DeltaNet's rule on falcon-1's kernels (falcon_lab/kernels/regression/gated_delta.py), fla's inputs and scale
GATED = "gated delta rule"
# the rules timed in more than one row (name, λ > 0): falcon-1 with λ = 0 and λ > 0, the latter followed by the
# gated delta rule on its kernels (beside fla's own); falcon-2 with each of its solves. Any other rule: one row of
# its own name, λ > 0
ROWS: dict[str, tuple[tuple[str, bool], ...]] = {
    "falcon-1": (("falcon-1 λ=0", False), ("falcon-1 λ>0", True), (GATED, True)),
    "falcon-2": tuple((name, True) for name in F2_FORMS),
}


def flop_family(spec: RuleSpec) -> str:
    """Which FLOP count of ``falcon_lab.bench.kernels.flops`` applies to a rule, from its spec's traits."""
    if not spec.regression:
        return "linear_window" if spec.windowed else "linear"
    return "delta_window" if spec.windowed else "delta_per_channel" if spec.per_channel else "delta"


def _fused_missing(spec: RuleSpec) -> Callable[[], str | None]:
    return lambda: None if spec.triton is not None else f"{spec.name} has no fused form"


def _falcon(rule: str, lam_positive: bool, f2_solve: str | None = None) -> tuple[Callable, Callable]:
    """Inputs and call of one Falcon rule on ``backend="triton"`` through the public op; ``f2_solve``: the form of
    falcon-2's per-column solve (``falcon_lab.kernels.regression.triton_launch.F2_SOLVE``; None: the default's)."""
    per_channel = rule_spec(rule).per_channel

    def make(shape: Shape, dtype: torch.dtype, seed: int) -> dict[str, Tensor]:
        B, T, H, D = shape
        x = _qkv(shape, dtype, seed)
        g = _gen(seed + 1)
        x["beta"] = _uniform((B, T, H, D) if per_channel else (B, T, H), 0.1, 1.9, dtype, g)
        x["lam"] = _uniform((B, T, H), 0.0, 0.5, dtype, g) if lam_positive else torch.zeros(B, T, H, dtype=dtype,
                                                                                          device="cuda")
        return x

    def call(x: dict[str, Tensor], backend: str = "triton") -> Tensor:
        from falcon_lab.kernels import fast_weight_rule
        from falcon_lab.kernels.regression import triton_launch

        before = triton_launch.F2_SOLVE
        triton_launch.F2_SOLVE = f2_solve or before
        try:  # the op's backward solves as its forward did
            return fast_weight_rule(x["q"], x["k"], x["v"], x["beta"], x["lam"], rule=rule, backend=backend,
                                    chunk_size=CHUNK)[0]
        finally:
            triton_launch.F2_SOLVE = before
    return make, call


def rule_ops(rules: Sequence[str]) -> list[Op]:
    """Every registered rule named in ``rules`` on backend="triton", in the registry's order, one row each but
    those of ``ROWS`` (falcon-1 with λ = 0 and λ > 0 and the gated delta rule on its kernels, falcon-2's three
    solves); falcon-3 and falcon-3a at B = 4."""
    ops = []
    for spec in rule_specs():
        if spec.name not in rules:
            continue
        missing = _fused_missing(spec)
        for name, lam_positive in ROWS.get(spec.name, ((spec.name, True),)):
            if name == GATED:
                ops.append(Op(GATED, "delta", missing, _delta_make(True), _gated_delta, rule=spec.name))
                continue
            make, call = _falcon(spec.name, lam_positive, f2_solve=F2_FORMS.get(name))
            ops.append(Op(name, flop_family(spec), missing, make, call, rule=spec.name, lam_positive=lam_positive))
    return ops


def _gated_delta(x: dict[str, Tensor], backend: str = "triton") -> Tensor:
    from falcon_lab.kernels import gated_delta_rule, gated_delta_triton

    op = gated_delta_triton if backend == "triton" else partial(gated_delta_rule, backend=backend)
    return op(x["q"], x["k"], x["v"], x["g"], x["beta"], scale=x["q"].shape[-1] ** -0.5, chunk_size=CHUNK)[0]


def rule_chunk_ops(rules: Sequence[str]) -> list[Op]:
    """The same rows as ``rule_ops`` on this project's PyTorch chunk form (``backend="chunk"``, autograd
    backward): what the Triton kernels are measured against for the "≥ 20× the PyTorch chunk form" target."""
    ops = []
    for op in rule_ops(rules):
        if op.name in F2_FORMS and op.name != "falcon-2":  # one PyTorch chunk form for falcon-2's rows
            continue
        if op.name == GATED:
            ops.append(Op(f"{GATED} PyTorch chunk", op.family, op.missing, op.make,
                          lambda x: _gated_delta(x, backend="chunk"), rule=op.rule))
            continue
        make, call = _falcon(op.rule, op.lam_positive)
        ops.append(Op(f"{op.name} PyTorch chunk", op.family, lambda: None, make,
                      lambda x, call=call: call(x, backend="chunk"), rule=op.rule, lam_positive=op.lam_positive))
    return ops


def torch_chunk_op() -> Op:
    """This project's pure-PyTorch chunk form of falcon-1a (autograd backward)."""
    make, call = _falcon("falcon-1a", True)
    return Op("falcon-1a PyTorch chunk", "linear", _module_missing("falcon_lab.kernels.inner_product.chunk", "not built"),
              make, lambda x: call(x, backend="chunk"), anchor=True)


def _fla_missing() -> str | None:
    return _module_missing("fla", "not installed (pip install fla-core==0.6.0)")()


def _delta_make(gated: bool) -> Callable:
    def make(shape: Shape, dtype: torch.dtype, seed: int) -> dict[str, Tensor]:
        B, T, H, _ = shape
        x = _qkv(shape, dtype, seed)
        g = _gen(seed + 1)
        x["beta"] = _uniform((B, T, H), 0.05, 0.95, dtype, g)
        if gated:
            x["g"] = F.logsigmoid(_uniform((B, T, H), 2.0, 6.0, torch.float32, g))
        return x
    return make


def _fla_delta(x: dict[str, Tensor]) -> Tensor:
    from fla.ops.delta_rule import chunk_delta_rule

    return chunk_delta_rule(x["q"], x["k"], x["v"], x["beta"])[0]


def _fla_gated_delta(x: dict[str, Tensor]) -> Tensor:
    from fla.ops.gated_delta_rule import chunk_gated_delta_rule

    return chunk_gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"])[0]


def _fla_gated_backward_refused(mode: str) -> str | None:
    """fla refuses the backward of its gated chunk ops with Triton 3.4-3.7.0 on Hopper (its issue #640: that
    Triton miscompiles chunk_bwd_dqkwg). Its own guard raises only after the forward and part of the backward
    have run (and autotuned, a minute per shape), so the benchmark asks the same question up front."""
    if mode != "fwd+bwd":
        return None
    from fla import utils

    if utils.IS_NVIDIA_HOPPER and utils.TRITON_ABOVE_3_4_0 and not utils.TRITON_ABOVE_3_7_1:
        import triton

        return (f"refused by fla: its guard for Triton >= 3.4.0, < 3.7.1 on Hopper (fla #640; Triton "
                f"{triton.__version__} here), checked before running")
    return None


def _gla_make(shape: Shape, dtype: torch.dtype, seed: int) -> dict[str, Tensor]:
    B, T, H, _ = shape
    x = _qkv(shape, dtype, seed)
    x["g"] = F.logsigmoid(_uniform((B, T, H), 2.0, 6.0, torch.float32, _gen(seed + 1)))
    return x


def _fla_simple_gla(x: dict[str, Tensor]) -> Tensor:
    from fla.ops.simple_gla import chunk_simple_gla

    return chunk_simple_gla(x["q"], x["k"], x["v"], g=x["g"])[0]


def _sdpa_make(shape: Shape, dtype: torch.dtype, seed: int) -> dict[str, Tensor]:
    x = _qkv(shape, dtype, seed)
    return {n: t.transpose(1, 2).contiguous() for n, t in x.items()}  # [B, H, T, D]


def _sdpa(x: dict[str, Tensor]) -> Tensor:
    from torch.nn.attention import SDPBackend, sdpa_kernel

    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        return F.scaled_dot_product_attention(x["q"], x["k"], x["v"], is_causal=True)


def anchor_ops() -> list[Op]:
    """fla's chunk_delta_rule, chunk_gated_delta_rule, chunk_simple_gla and torch SDPA (flash, causal)."""
    return [Op("fla chunk_delta_rule", "delta", _fla_missing, _delta_make(False), _fla_delta, anchor=True),
            Op("fla chunk_gated_delta_rule", "delta", _fla_missing, _delta_make(True), _fla_gated_delta, anchor=True,
               refuses=_fla_gated_backward_refused),
            Op("fla chunk_simple_gla", "linear", _fla_missing, _gla_make, _fla_simple_gla, anchor=True,
               refuses=_fla_gated_backward_refused),
            Op("torch SDPA causal", "softmax", lambda: None, _sdpa_make, _sdpa, anchor=True)]
