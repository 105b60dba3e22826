"""The gated delta rule: chunk form against the recurrent oracle, continuation, gradients, falcon-1 mapping."""

from __future__ import annotations

import functools
import itertools
import zlib

import pytest
import torch

from falcon_lab.kernels import FastWeightState, fast_weight_rule, gated_delta_rule
from falcon_lab.kernels.regression.gated_delta import gated_delta_triton

TINY = 1e-300


def rel(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out - ref).norm() / ref.norm().clamp(min=TINY)).item()


def inputs(T: int, seed: int, gated: bool = True, B: int = 2, H: int = 2, Dk: int = 4, Dv: int = 5,
           dtype: torch.dtype = torch.float64) -> dict:
    """L2-normalised keys (as DeltaNet uses), β ∈ (0, 2), log decays g ≤ 0 (or 0: DeltaNet)."""
    gen = torch.Generator().manual_seed(seed)
    randn = lambda *s: torch.randn(*s, generator=gen, dtype=dtype)  # noqa: E731
    k = torch.nn.functional.normalize(randn(B, T, H, Dk), dim=-1)
    g = -3 * torch.rand(B, T, H, generator=gen, dtype=dtype) if gated else torch.zeros(B, T, H, dtype=dtype)
    beta = 2 * torch.rand(B, T, H, generator=gen, dtype=dtype)
    return dict(q=randn(B, T, H, Dk), k=k, v=randn(B, T, H, Dv), g=g, beta=beta)


def run(x: dict, backend: str, chunk_size: int = 64, **opts):
    return gated_delta_rule(x["q"], x["k"], x["v"], x["g"], x["beta"], backend=backend, chunk_size=chunk_size,
                            output_final_state=True, **opts)


@pytest.mark.parametrize("alignment,timing,T,gated", list(itertools.product(
    ("same_time", "shifted"), ("raw", "rbw"), (1, 7, 63, 130), (True, False))))
def test_chunk_matches_recurrent(alignment: str, timing: str, T: int, gated: bool) -> None:
    x = inputs(T, seed=zlib.crc32(f"{alignment}{timing}{T}{gated}".encode()), gated=gated)
    S0 = torch.randn(2, 2, 4, 5, dtype=torch.float64, generator=torch.Generator().manual_seed(T))
    opts = dict(alignment=alignment, timing=timing, scale=0.5, initial_state=S0)
    o_ref, st_ref = run(x, "recurrent", **opts)
    for C in (1, 4, 16, 64):
        o, st = run(x, "chunk", C, **opts)
        assert rel(o, o_ref) <= 1e-10 and rel(st.S, st_ref.S) <= 1e-10, C
        assert torch.equal(st.last_key, x["k"][:, -1])


@pytest.mark.parametrize("alignment,timing", list(itertools.product(("same_time", "shifted"), ("raw", "rbw"))))
def test_continuation(alignment: str, timing: str) -> None:
    """Two segments with the state handed over (first by the oracle) equal one pass."""
    x = inputs(40, seed=9)
    opts = dict(alignment=alignment, timing=timing)
    o_ref, st_ref = run(x, "recurrent", **opts)
    o1, st1 = run({n: t[:, :13] for n, t in x.items()}, "recurrent", **opts)
    assert isinstance(st1, FastWeightState)
    for backend, C in (("recurrent", 64), ("chunk", 5)):
        o2, st2 = run({n: t[:, 13:] for n, t in x.items()}, backend, C, initial_state=st1, **opts)
        assert rel(torch.cat([o1, o2], dim=1), o_ref) <= 1e-10
        assert rel(st2.S, st_ref.S) <= 1e-10


def test_shifted_boundary_writes_nothing() -> None:
    """Shifted and fresh: token 1 has x_1 = 0, so S_1 = exp(g_1) S_0 and the RBW read of token 2 sees it."""
    x = inputs(3, seed=1)
    S0 = torch.randn(2, 2, 4, 5, dtype=torch.float64)
    for backend in ("recurrent", "chunk"):
        _, st = run({n: t[:, :1] for n, t in x.items()}, backend, alignment="shifted", initial_state=S0)
        assert rel(st.S, torch.exp(x["g"][:, 0])[..., None, None] * S0) <= 1e-14
        o_rbw, _ = run(x, backend, alignment="shifted", timing="rbw", initial_state=S0)
        expected = torch.einsum("bhkv,bhk->bhv", st.S, x["q"][:, 1])
        assert rel(o_rbw[:, 1], expected) <= 1e-12


@pytest.mark.parametrize("alignment,timing", list(itertools.product(("same_time", "shifted"), ("raw", "rbw"))))
def test_gradients_match_recurrent(alignment: str, timing: str) -> None:
    x = inputs(10, seed=3, B=1, Dk=3, Dv=4)
    S0 = torch.randn(1, 2, 3, 4, dtype=torch.float64)
    gen = torch.Generator().manual_seed(8)
    do = torch.randn(1, 10, 2, 4, dtype=torch.float64, generator=gen)
    dS = torch.randn(1, 2, 3, 4, dtype=torch.float64, generator=gen)

    def grads(backend: str, C: int):
        xs = {n: t.clone().requires_grad_() for n, t in x.items()}
        s0 = S0.clone().requires_grad_()
        o, st = run(xs, backend, C, alignment=alignment, timing=timing, scale=0.8, initial_state=s0)
        return torch.autograd.grad((o * do).sum() + (st.S * dS).sum(), [*xs.values(), s0])

    ref = grads("recurrent", 64)
    for C in (3, 64):
        for name, g, g_ref in zip(("q", "k", "v", "g", "beta", "S0"), grads("chunk", C), ref):
            assert rel(g, g_ref) <= 1e-10, (C, name)


@pytest.mark.parametrize("alignment,timing", list(itertools.product(("same_time", "shifted"), ("raw", "rbw"))))
def test_falcon_1_is_the_gated_delta_rule(alignment: str, timing: str) -> None:
    """falcon-1 ≡ gated delta rule with k = x, g = log γ, β' = η/γ, v' = γ v (η, γ written out per SPEC §1;
    both sides align the keys the same way, so their write features x agree)."""
    B, T, H, D = 2, 23, 2, 4
    gen = torch.Generator().manual_seed(21)
    q, k, v = (torch.randn(B, T, H, D, dtype=torch.float64, generator=gen) for _ in range(3))
    beta = 0.05 + 1.9 * torch.rand(B, T, H, dtype=torch.float64, generator=gen)
    lam = torch.exp(-3 + 8 * torch.rand(B, T, H, dtype=torch.float64, generator=gen))
    eps, floor = 1e-6, 1e-3
    x = torch.cat([torch.zeros_like(k[:, :1]), k[:, :-1]], dim=1) if alignment == "shifted" else k
    eta = beta / ((x * x).sum(-1) + lam + eps)
    if alignment == "shifted":
        eta[:, 0] = 0.0  # the fresh boundary pair is not a pair
    gamma = 1 - torch.clamp(eta * lam, max=1 - floor)
    assert (eta * lam > 1 - floor).any()  # the clamp is active somewhere
    o_ref, st_ref = fast_weight_rule(q, k, v, beta, lam, rule="falcon-1", eps=eps, decay_floor=floor,
                                     alignment=alignment, timing=timing, output_final_state=True)
    for backend in ("recurrent", "chunk"):
        o, st = gated_delta_rule(q, k, gamma[..., None] * v, torch.log(gamma), eta / gamma,
                                 alignment=alignment, timing=timing, backend=backend, chunk_size=8,
                                 output_final_state=True)
        assert rel(o, o_ref) <= 1e-10 and rel(st.S, st_ref.S) <= 1e-10, backend


def test_strong_decay_in_float32_stays_finite() -> None:
    """g = −30 on every token (carry ~1e−13): chunk decays underflow to 0, never overflow."""
    x = inputs(130, seed=6, dtype=torch.float32)
    x["g"] = torch.full_like(x["g"], -30.0)
    o_ref, _ = run(x, "recurrent")
    o, st = run(x, "chunk", 64)
    assert torch.isfinite(o).all() and torch.isfinite(st.S).all()
    assert rel(o, o_ref) <= 1e-5


def test_zero_keys_and_low_precision() -> None:
    """Zero keys give finite outputs and gradients; bfloat16 in, bfloat16 out, fp32 state."""
    x = inputs(9, seed=2)
    x["k"][:, 3:] = 0.0
    xs = {n: t.requires_grad_() for n, t in x.items()}
    o, st = run(xs, "chunk", 4)
    grads = torch.autograd.grad(o.sum() + st.S.sum(), list(xs.values()))
    assert all(torch.isfinite(g).all() for g in grads)
    low = {n: t.detach().to(torch.bfloat16) for n, t in x.items()}
    o, st = run(low, "chunk", 4)
    assert o.dtype == torch.bfloat16 and st.S.dtype == torch.float32


@pytest.mark.parametrize("change,name", [
    (dict(g=torch.zeros(2, 5, 2, 1)), "g"), (dict(beta=torch.zeros(2, 5, 3)), "beta"),
    (dict(k=torch.zeros(2, 5, 2, 3)), "k"), (dict(v=torch.zeros(2, 4, 2, 5)), "v"),
    (dict(q=torch.zeros(2, 5, 2)), "q"), (dict(beta=torch.zeros(2, 5, 2, dtype=torch.long)), "beta"),
    (dict(alignment="left"), "alignment"), (dict(timing="late"), "timing"), (dict(backend="fast"), "backend"),
    (dict(chunk_size=0), "chunk_size"), (dict(scale="1"), "scale"),
    (dict(initial_state=torch.zeros(2, 2, 4, 4)), "initial_state"),
])
def test_bad_input_names_the_argument(change: dict, name: str) -> None:
    args = dict(q=torch.zeros(2, 5, 2, 4), k=torch.zeros(2, 5, 2, 4), v=torch.zeros(2, 5, 2, 5),
                g=torch.zeros(2, 5, 2), beta=torch.zeros(2, 5, 2))
    args.update(change)
    with pytest.raises(ValueError, match=rf"^{name}\b"):
        gated_delta_rule(**args)


@pytest.mark.parametrize("alignment,timing", list(itertools.product(("same_time", "shifted"), ("raw", "rbw"))))
def test_deltanet_on_falcon_1s_fused_kernels(alignment: str, timing: str) -> None:
    """DeltaNet as the mixer runs it on a GPU: falcon-1's op with η = β and λ = 0 on its fused kernels (Triton's
    interpreter without CUDA), continuing the oracle's state after 9 tokens, against the gated delta rule's float64
    oracle with g = None: outputs, final state and every input's gradient."""
    x = inputs(46, seed=zlib.crc32(f"fused{alignment}{timing}".encode()), gated=False, Dk=16, Dv=16)
    x["beta"] = x["beta"] / 2  # DeltaNet's β ∈ (0, 1)
    opts = dict(alignment=alignment, timing=timing)
    _, first = run({**{n: t[:, :9] for n, t in x.items()}, "g": None}, "recurrent", **opts)
    rest = {n: t[:, 9:] for n, t in x.items()}
    device = "cuda" if torch.cuda.is_available() else "cpu"
    w = torch.randn(2, 37, 2, 16, dtype=torch.float64, generator=torch.Generator().manual_seed(5))

    def go(fused: bool, dtype: torch.dtype):
        ins = {n: rest[n].to(device, dtype).detach().clone().requires_grad_() for n in ("q", "k", "v", "beta")}
        state = FastWeightState(*(t.to(device, dtype) if t.is_floating_point() else t.to(device) for t in first))
        if fused:
            o, final = fast_weight_rule(ins["q"] * 0.25, ins["k"], ins["v"], eta=ins["beta"],
                                        lam=torch.zeros_like(ins["beta"]), rule="falcon-1", backend="triton",
                                        chunk_size=16, initial_state=state, output_final_state=True, **opts)
        else:
            o, final = gated_delta_rule(ins["q"], ins["k"], ins["v"], None, ins["beta"], scale=0.25,
                                        backend="recurrent", initial_state=state, output_final_state=True, **opts)
        ((o * w.to(device, dtype)).sum() + final.S.sum()).backward()
        return [o, final.S, final.last_key, *(ins[n].grad for n in ("q", "k", "v", "beta"))]

    for name, a, b in zip(("o", "S", "last_key", "dq", "dk", "dv", "dbeta"), go(True, torch.float32),
                          go(False, torch.float64)):
        assert rel(a.double().cpu(), b.cpu()) < 1e-4, name


def test_no_gate_is_a_zero_gate() -> None:
    x = inputs(9, seed=1, gated=False)
    out, _ = gated_delta_rule(x["q"], x["k"], x["v"], None, x["beta"], backend="chunk")
    ref, _ = run(x, "recurrent")
    assert rel(out, ref) < 1e-10


def fused_grads(x: dict, backend: str, dtype: torch.dtype, device: str, state=None, **opts) -> list[torch.Tensor]:
    """o, final S and the gradients of q, k, v, g, β (and S0 when ``state`` is a bare S) of a weighted loss."""
    ins = {n: t.to(device, dtype).detach().clone().requires_grad_() for n, t in x.items()}
    if isinstance(state, torch.Tensor):
        state = state.to(device, dtype).detach().clone().requires_grad_()
    elif state is not None:
        state = FastWeightState(*(t.to(device, dtype) if t.is_floating_point() else t.to(device) for t in state))
    op = gated_delta_triton if backend == "triton" else functools.partial(gated_delta_rule, backend=backend)
    o, final = op(ins["q"], ins["k"], ins["v"], ins["g"], ins["beta"], scale=0.5, chunk_size=16, initial_state=state,
                  output_final_state=True, **opts)
    w = torch.randn(o.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(3)).to(device, dtype)
    ((o * w).sum() + final.S.sum()).backward()
    out = [o, final.S, *(ins[n].grad for n in ("q", "k", "v", "g", "beta"))]
    return out + ([state.grad] if isinstance(state, torch.Tensor) else [])


NAMES = ("o", "S", "dq", "dk", "dv", "dg", "dbeta", "dS0")
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.mark.parametrize("alignment,timing", list(itertools.product(("same_time", "shifted"), ("raw", "rbw"))))
def test_fused_kernels_match_the_oracle(alignment: str, timing: str) -> None:
    """``gated_delta_triton`` (falcon-1's kernels with the decay inside the residual; Triton's interpreter without CUDA)
    against the float64 oracle: from a bare S0 over 45 tokens (chunks of 16, the last one short) and, shifted,
    continuing the oracle's state after 9 tokens; outputs, final state and every gradient."""
    x = inputs(45, seed=zlib.crc32(f"fused-gated{alignment}{timing}".encode()), Dk=16, Dv=32)
    opts = dict(alignment=alignment, timing=timing)
    S0 = torch.randn(2, 2, 16, 32, dtype=torch.float64, generator=torch.Generator().manual_seed(4))
    for name, a, b in zip(NAMES, fused_grads(x, "triton", torch.float32, DEVICE, S0, **opts),
                          fused_grads(x, "recurrent", torch.float64, "cpu", S0, **opts)):
        assert rel(a.double().cpu(), b) < 1e-4, name
    if alignment == "same_time":  # the continued state matters most where the last key is a pair of the next
        return
    _, first = run({n: t[:, :9] for n, t in x.items()}, "recurrent", **opts)
    rest = {n: t[:, 9:] for n, t in x.items()}
    for name, a, b in zip(NAMES, fused_grads(rest, "triton", torch.float32, DEVICE, first, **opts),
                          fused_grads(rest, "recurrent", torch.float64, "cpu", first, **opts)):
        assert rel(a.double().cpu(), b) < 1e-4, ("continued", name)


def test_fused_packed_sequences_start_fresh() -> None:
    """cu_seqlens on the kernels: three sequences packed along T equal each run alone by the oracle, outputs,
    final states (one row each) and gradients; the decay of a sequence's first token reaches no other."""
    x = inputs(45, seed=31, B=1, Dk=16, Dv=16)
    bounds = [0, 7, 30, 45]
    cu = torch.tensor(bounds, dtype=torch.int32, device=DEVICE)
    ins = {n: t.to(DEVICE, torch.float32).detach().clone().requires_grad_() for n, t in x.items()}
    o, final = gated_delta_triton(ins["q"], ins["k"], ins["v"], ins["g"], ins["beta"], scale=0.5, chunk_size=16,
                                  output_final_state=True, cu_seqlens=cu, alignment="shifted")
    (o.square().sum() + final.S.sum()).backward()
    assert final.S.shape == (3, 2, 16, 16)
    ref = {n: t.detach().clone().requires_grad_() for n, t in x.items()}
    loss = 0.0
    for n, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
        o_n, st_n = gated_delta_rule(*(ref[m][:, a:b] for m in ("q", "k", "v", "g", "beta")), scale=0.5,
                                     backend="recurrent", output_final_state=True, alignment="shifted")
        assert rel(o[:, a:b].double().cpu(), o_n.detach()) < 1e-4, n
        assert rel(final.S[n].double().cpu(), st_n.S[0].detach()) < 1e-4, n
        loss = loss + o_n.square().sum() + st_n.S.sum()
    loss.backward()
    for name in ("q", "k", "v", "g", "beta"):
        assert rel(ins[name].grad.double().cpu(), ref[name].grad) < 1e-4, name


def test_fused_strong_decay_stays_finite() -> None:
    """g = −30 on every token and −80 on some (a carry far below falcon's decay floor) on the kernels: finite,
    and the oracle's outputs and gradients (dg, about 1e−13 here, to within 1e−9: fp32 decays underflow)."""
    x = inputs(40, seed=8, Dk=16, Dv=16)
    x["g"] = torch.full_like(x["g"], -30.0)
    x["g"][:, ::7] = -80.0
    a = fused_grads(x, "triton", torch.float32, DEVICE)
    b = fused_grads(x, "recurrent", torch.float64, "cpu")
    assert all(torch.isfinite(t).all() for t in a)
    for name, ta, tb in zip(NAMES, a, b):
        if name == "dg":
            assert (ta.double().cpu() - tb).abs().max() < 1e-9
        else:
            assert rel(ta.double().cpu(), tb) < 1e-4, name


def test_fused_refusals_name_the_problem() -> None:
    x = inputs(5, seed=1, Dk=16, Dv=16)
    args = [x[n] for n in ("q", "k", "v", "g", "beta")]
    with pytest.raises(ValueError, match="float64"):  # the kernels take bf16, fp16 and fp32
        gated_delta_triton(*args)
    f32 = [t.float() for t in args]
    with pytest.raises(ValueError, match="^chunk_size=8 for backend='triton'"):
        gated_delta_triton(*f32, chunk_size=8)
    with pytest.raises(ValueError, match="^g\\b"):
        gated_delta_triton(*f32[:3], f32[3][..., :1], f32[4])
    with pytest.raises(ValueError, match="batch of one"):
        gated_delta_triton(*f32, cu_seqlens=torch.tensor([0, 5]))


@pytest.mark.gpu
@pytest.mark.parametrize("dk,dv", [(64, 64), (128, 128), (64, 128)])
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-3), (torch.bfloat16, 1e-2)])
def test_fused_gpu_sizes(dk: int, dv: int, dtype: torch.dtype, tol: float) -> None:
    """The kernels at head sizes the mixers use (Gated DeltaNet's values twice its keys) over 300 tokens (four
    chunks of 64, the last one short), from a bare S0, against the float64 oracle fed the same rounded inputs."""
    x = {n: t.to(dtype).double() for n, t in inputs(300, seed=dk + dv, Dk=dk, Dv=dv).items()}
    S0 = torch.randn(2, 2, dk, dv, generator=torch.Generator().manual_seed(6)).to(dtype).double()
    for name, a, b in zip(NAMES, fused_grads(x, "triton", dtype, "cuda", S0),
                          fused_grads(x, "recurrent", torch.float64, "cuda", S0)):
        assert rel(a.double(), b) < tol, name


@pytest.mark.parametrize("packed", [False, True])
def test_fused_slices_past_the_launch_limit(packed: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    """Rows (or packed sequences) whose launch grid passes CUDA's axis limit run in slices that fit: the same
    outputs, final states and gradients as one launch (the limit lowered so that every row or sequence is a slice)."""
    from falcon_lab.kernels.common import grid

    x = inputs(20 if packed else 10, seed=12, B=1 if packed else 2, Dk=16, Dv=16)
    opts = dict(cu_seqlens=torch.tensor([0, 5, 19, 20], device=DEVICE)) if packed else {}

    def run_all() -> list[torch.Tensor]:
        ins = {n: t.to(DEVICE, torch.float32).detach().clone().requires_grad_() for n, t in x.items()}
        o, final = gated_delta_triton(ins["q"], ins["k"], ins["v"], ins["g"], ins["beta"], chunk_size=16,
                                      output_final_state=True, **opts)
        (o.square().sum() + final.S.sum()).backward()
        return [o, final.S, *(ins[n].grad for n in ("q", "k", "v", "g", "beta"))]

    whole = run_all()
    monkeypatch.setattr(grid, "MAX_GRID_ROWS", 4)
    assert len(grid.sequence_groups([0, 5, 19, 20], 2, 16) if packed else grid.row_groups(2, 10, 2, 16)) == 3 - (
        not packed)
    for name, a, b in zip(NAMES, whole, run_all()):
        torch.testing.assert_close(b, a, rtol=1e-6, atol=1e-6, msg=name)
