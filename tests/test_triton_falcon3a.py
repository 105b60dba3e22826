"""backend="triton" for falcon-3a (one delayed decayed linear attention on the falcon-1a kernels and a band,
falcon_lab/kernels/window/fused.py) against the float64 recurrent oracle: outputs, final state and every gradient; and that
decayed attention (gates given as they are) against its recurrence. Without CUDA the kernels run in Triton's
interpreter at tiny sizes; every buffer the kernels write is allocated full of NaN here.
"""

from __future__ import annotations

import pytest
import torch

from falcon_lab.kernels import FastWeightState, fast_weight_rule
from tests.test_triton_inner_product import (  # noqa: F401 (poisoned: the autouse fixture, used by name)
    DEVICE, TOL_FP32, check, check_continuation, inputs, poisoned, run)

RULE = "falcon-3a"


@pytest.mark.parametrize("window", [1, 2, 4])
@pytest.mark.parametrize("timing", ["raw", "rbw"])
@pytest.mark.parametrize("alignment", ["shifted", "same_time"])
def test_forward_and_gradients_match_the_oracle(window: int, timing: str, alignment: str) -> None:
    x = inputs(RULE, B=2, T=37, H=1, D=16, seed=window * 10 + (timing == "rbw") * 2 + (alignment == "shifted"))
    opts = dict(rule=RULE, window=window, timing=timing, alignment=alignment)
    check(run(x, "triton", torch.float32, chunk_size=16, **opts), run(x, "recurrent", torch.float64, **opts),
          TOL_FP32)


@pytest.mark.parametrize("window", [1, 3])
@pytest.mark.parametrize(("timing", "alignment"), [("raw", "shifted"), ("rbw", "same_time")])
def test_fresh_rows_with_outputs_alone_match_the_oracle(window: int, timing: str, alignment: str) -> None:
    """No state in or out (a model's forward): the form for fresh sequences (``triton_falcon3a_packed`` over rows,
    each row one sequence) against the oracle, outputs and the gradients of q, k, v, β and λ."""
    x = inputs(RULE, B=2, T=37, H=2, D=16, seed=60 + window)
    opts = dict(rule=RULE, window=window, timing=timing, alignment=alignment, scale_coupled_ridge=window == 3)

    def outputs_and_grads(backend: str, dtype: torch.dtype) -> list[torch.Tensor]:
        leaves = [x[n].detach().to(DEVICE, dtype).requires_grad_(True) for n in ("q", "k", "v", "beta", "lam")]
        o, final = fast_weight_rule(*leaves[:3], beta=leaves[3], lam=leaves[4], backend=backend, chunk_size=16,
                                    **opts)
        assert final is None
        (o.double() * x["w"].to(DEVICE, torch.float64)).sum().backward()
        return [o] + [t.grad for t in leaves]

    got, ref = outputs_and_grads("triton", torch.float32), outputs_and_grads("recurrent", torch.float64)
    for name, a, b in zip(("o", "q", "k", "v", "beta", "lam"), got, ref):
        assert not torch.isnan(a).any(), name
        err = ((a.double().cpu() - b.cpu()).norm() / b.cpu().norm().clamp(min=1e-30)).item()
        assert err <= TOL_FP32, f"{name}: relative error {err:.2e}"


def test_fresh_rows_with_outputs_alone_take_the_form_for_fresh_sequences(monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh batch with outputs alone runs on ``triton_falcon3a_packed`` (its glue, compiled on a GPU), not the
    stateful form; with a final state asked for, on the stateful form."""
    from falcon_lab.kernels.window import fused

    calls = []
    for name in ("triton_falcon3a_packed", "triton_falcon3a"):
        real = getattr(fused, name)
        monkeypatch.setattr(fused, name, lambda *a, _real=real, _name=name, **kw: calls.append(_name) or
                            _real(*a, **kw))
    x = inputs(RULE, B=1, T=20, H=1, D=16, seed=3)
    ins = [x[n].to(DEVICE, torch.float32) for n in ("q", "k", "v", "beta", "lam")]
    fast_weight_rule(*ins, rule=RULE, window=3, backend="triton", chunk_size=16)
    fast_weight_rule(*ins, rule=RULE, window=3, backend="triton", chunk_size=16, output_final_state=True)
    assert calls == ["triton_falcon3a_packed", "triton_falcon3a"]


@pytest.mark.parametrize("variant", ["scale_coupled_ridge", "ctx_eta", "clamped"])
def test_ridge_options_and_the_decay_clamp(variant: str) -> None:
    """λ̄·Ē, η given directly (eta=), and λ large enough that α = min(ηλ, 1 − ε_γ) clamps."""
    clamped = variant == "clamped"
    x = inputs(RULE, B=1, T=26, H=2, D=16, seed=len(variant), lam_scale=40.0 if clamped else 1.0)
    opts = dict(rule=RULE, window=3, scale_coupled_ridge=variant == "scale_coupled_ridge",
                normalize=variant != "ctx_eta")
    if variant == "ctx_eta":
        x["beta"] = x["beta"] * 0.1
    check(run(x, "triton", torch.float32, chunk_size=32, **opts), run(x, "recurrent", torch.float64, **opts),
          TOL_FP32)


def test_continuing_from_a_state_with_its_window_tail_equals_one_pass() -> None:
    """A first segment by the oracle, the second by the kernels from its state: S, the last key and the last
    W − 1 pairs, which the second segment's first windows read."""
    check_continuation(inputs(RULE, B=1, T=30, H=2, D=16, seed=7), split=11, rule=RULE, window=4)


def test_the_final_state_continues_the_oracle() -> None:
    """Every field of the final state (the window tail included) equals the oracle's."""
    x = inputs(RULE, B=2, T=21, H=2, D=16, seed=5)
    ins = [x[n].to(DEVICE) for n in ("q", "k", "v", "beta", "lam")]
    _, fast = fast_weight_rule(*ins, rule=RULE, backend="triton", chunk_size=16, output_final_state=True)
    _, ref = fast_weight_rule(*(t.double() for t in ins), rule=RULE, backend="recurrent", output_final_state=True)
    for name, a, b in zip(FastWeightState._fields, fast, ref):
        if a.is_floating_point():
            assert torch.allclose(a.double(), b, atol=1e-4), name
        else:
            assert torch.equal(a, b), name


@pytest.mark.parametrize("timing,alignment,window", [("raw", "shifted", 4), ("rbw", "shifted", 4),
                                                     ("raw", "same_time", 4), ("rbw", "same_time", 2)])
def test_packed_sequences_run_as_one_row(timing: str, alignment: str, window: int) -> None:
    """Fresh states, outputs alone: one row, the delayed pass on the kernels' packed sequences and the band cut at
    every sequence's start (``triton_falcon3a_packed``), against the oracle on each sequence
    (``check_packed_outputs``: lengths 5, 16, 1 and 18, one shorter than the window)."""
    from falcon_lab.kernels.window import fused
    from tests.test_triton_falcon3 import check_packed_outputs

    calls = []
    packed = fused.triton_falcon3a_packed
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(fused, "triton_falcon3a_packed", lambda *a: calls.append(1) or packed(*a))
        check_packed_outputs(RULE, timing, window=window, alignment=alignment)
    assert calls == [1]


def test_packed_sequences_from_states_match_one_call_each() -> None:
    from tests.test_triton_falcon3 import check_packed_from_states

    check_packed_from_states(RULE)


def test_the_form_itself_refuses_packed_sequences_by_name() -> None:
    from falcon_lab.kernels.common.config import RuleConfig
    from falcon_lab.kernels.window.fused import triton_falcon3a

    x = inputs(RULE, B=1, T=12, H=1, D=16, seed=3)
    ins = [x[n].to(DEVICE) for n in ("q", "k", "v", "beta", "lam")]
    with pytest.raises(ValueError, match="triton_falcon3a takes no cu_seqlens"):
        triton_falcon3a(*ins, RuleConfig(rule=RULE), None, True, cu_seqlens=torch.tensor([0, 5, 12], device=DEVICE))


@pytest.mark.parametrize("T", [7, 40])
@pytest.mark.parametrize("raw", [True, False])
def test_decayed_attention_with_given_gates_matches_its_recurrence(T: int, raw: bool) -> None:
    """S_t = γ_t S_{t−1} + η_t k_t v_tᵀ read at t (RAW) or t − 1 (RBW), from a state: outputs, final state and
    the gradients of q, k, v, η, log γ and S_0 against float64, across chunks of 16 and a short last one."""
    from falcon_lab.kernels.inner_product.fused import decayed_attention

    g = torch.Generator().manual_seed(T + raw)
    B, H, Dk, Dv = 2, 2, 8, 16
    q, k = torch.randn(B, T, H, Dk, generator=g), torch.randn(B, T, H, Dk, generator=g)
    v = torch.randn(B, T, H, Dv, generator=g)
    eta, log_gamma = torch.rand(B, T, H, generator=g), -torch.rand(B, T, H, generator=g)
    S0 = torch.randn(B, H, Dk, Dv, generator=g)
    w_o, w_s = torch.randn(B, T, H, Dv, generator=g), torch.randn(B, H, Dk, Dv, generator=g)

    def loss_and_grads(fn, dtype):
        ins = [t.to(DEVICE, dtype).detach().clone().requires_grad_() for t in (q, k, v, eta, log_gamma, S0)]
        o, S = fn(*ins)
        ((o * w_o.to(DEVICE, dtype)).sum() + (S * w_s.to(DEVICE, dtype)).sum()).backward()
        return [o, S, *(t.grad for t in ins)]

    def recurrence(q, k, v, eta, log_gamma, S):
        out = []
        for t in range(T):
            before = S
            S = log_gamma[:, t].exp()[..., None, None] * S + eta[:, t][..., None, None] * torch.einsum(
                "bhk,bhv->bhkv", k[:, t], v[:, t])
            out.append(torch.einsum("bhkv,bhk->bhv", S if raw else before, q[:, t]))
        return torch.stack(out, 1), S

    fast = loss_and_grads(lambda *x: decayed_attention(*x, raw=raw, chunk_size=16), torch.float32)
    ref = loss_and_grads(recurrence, torch.float64)
    for name, a, b in zip(("o", "S", "dq", "dk", "dv", "deta", "dlog_gamma", "dS0"), fast, ref):
        assert torch.allclose(a.double(), b, atol=TOL_FP32, rtol=TOL_FP32), name


@pytest.mark.parametrize(("delay", "full"), [(1, False), (3, False), (3, True)])
@pytest.mark.parametrize("form", ["rows", "samples", "packed"])
def test_decayed_attention_reads_its_pairs_delay_tokens_back(form: str, delay: int, full: bool) -> None:
    """``delay=d``: token t writes the pair of t − d, read where it lies, exactly as the pairs moved d tokens later
    with zeros in front (falcon-3a's delayed pass before): outputs, final states and every gradient, RAW and RBW,
    over rows (chunks of 16, a short last one, or ``full`` chunks: then no padding token writes the last d rows'
    gradients), rows of samples by id (moved along the whole row) and packed sequences (none read before a
    sequence's start: the moved copy's pairs there have no gain)."""
    from falcon_lab.kernels.inner_product.fused import decayed_attention
    from falcon_lab.kernels.window.fused import _late

    g = torch.Generator().manual_seed(delay + 7 * len(form))
    B, T, H, Dk, Dv = (1, 48 if full else 45, 2, 8, 16) if form == "packed" else (2, 32 if full else 37, 2, 8, 16)
    q, k = torch.randn(B, T, H, Dk, generator=g), torch.randn(B, T, H, Dk, generator=g)
    v = torch.randn(B, T, H, Dv, generator=g)
    eta, log_gamma = torch.rand(B, T, H, generator=g), -torch.rand(B, T, H, generator=g)
    opts: dict = {}
    N, keep = B, torch.ones(1, T, 1)
    if form == "samples":
        lengths = [[1, 15, 2, T - 18], [T]]
        opts["sample_id"] = torch.stack([torch.repeat_interleave(torch.arange(len(n)), torch.tensor(n))
                                         for n in lengths]).to(DEVICE)
    elif form == "packed":
        bounds = [0, 2, 20, 21, 45] if not full else [0, 16, 17, 32, 48]  # full: two sequences of full chunks
        opts["cu_seqlens"] = torch.tensor(bounds, device=DEVICE)
        N = len(bounds) - 1
        place = torch.cat([torch.arange(b - a) for a, b in zip(bounds, bounds[1:])])
        keep = (place >= delay)[None, :, None].float()  # no gain for a pair before a sequence's start
    S0 = torch.randn(N, H, Dk, Dv, generator=g) * (form != "samples")
    w_o, w_s = torch.randn(B, T, H, Dv, generator=g), torch.randn(N, H, Dk, Dv, generator=g)
    for raw in (True, False):
        def grads(moved: bool) -> list[torch.Tensor]:
            ins = [t.to(DEVICE).clone().requires_grad_() for t in (q, k, v, eta, log_gamma, S0)]
            gain = ins[3] * keep.to(DEVICE)
            if moved:
                o, S = decayed_attention(ins[0], _late(ins[1], delay), _late(ins[2], delay), gain, *ins[4:], raw=raw,
                                         chunk_size=16, **opts)
            else:
                o, S = decayed_attention(*ins[:3], gain, *ins[4:], raw=raw, chunk_size=16, delay=delay, **opts)
            ((o * w_o.to(DEVICE)).sum() + (S * w_s.to(DEVICE)).sum()).backward()
            return [o, S, *(t.grad for t in ins)]

        for name, a, b in zip(("o", "S", "dq", "dk", "dv", "deta", "dlog_gamma", "dS0"), grads(False), grads(True)):
            assert torch.isfinite(a).all(), (raw, name)
            torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, msg=f"{'raw' if raw else 'rbw'} {name}")
    with pytest.raises(ValueError, match="delay must be >= 0, got -1"):
        decayed_attention(*(t.to(DEVICE) for t in (q, k, v, eta, log_gamma, S0)), delay=-1, **opts)


@pytest.mark.parametrize(("window", "timing", "alignment"), [(3, "raw", "shifted"), (4, "rbw", "same_time"),
                                                            (1, "raw", "same_time")])
def test_the_packed_glue_compiles_whole_and_gives_its_eager_values_and_gradients(window: int, timing: str,
                                                                                 alignment: str) -> None:
    """What falcon-3a's packed form computes around its two kernels is one graph for torch.compile (no break),
    shapes dynamic (one compilation for every row length), with the eager function's values and gradients."""
    from falcon_lab.kernels.common.config import RuleConfig
    from falcon_lab.kernels.window.fused import _packed_glue, packed_windows

    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    torch.manual_seed(window)
    cfg = RuleConfig(rule="falcon-3a", window=window, alignment=alignment, timing=timing)
    compiled = torch.compile(_packed_glue, dynamic=True, fullgraph=True, backend="aot_eager")
    for T, lengths in ((13, [3, 1, 9]), (21, [5, 7, 2, 7])):  # a second length: no recompilation
        bounds = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
        win = packed_windows(bounds, T, window, cfg.shifted)
        ins = [torch.randn(1, T, 2, 4).requires_grad_() for _ in range(2)]  # q, k
        gates = [(torch.rand(1, T, 2) + 0.1).requires_grad_() for _ in range(2)]
        outs = [f(*ins, *gates, win.pair, win.held, win.n_pairs, win.inside, cfg) for f in (_packed_glue, compiled)]
        for want, got in zip(*outs):
            if want is None:
                assert got is None
                continue
            torch.testing.assert_close(got, want)
        leaves = [*ins, *gates]
        grads = [torch.autograd.grad([t.float().sum() * (i + 1) for i, t in enumerate(out) if t is not None],
                                     leaves, allow_unused=True) for out in outs]
        for want, got in zip(*grads):
            if want is None:
                assert got is None
                continue
            torch.testing.assert_close(got, want)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] <= 1


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,tol", [(torch.float32, 1e-3), (torch.bfloat16, 2e-2)])
def test_gpu_rows_of_samples(dtype: torch.dtype, tol: float) -> None:
    """falcon-3a by sample id at a thinned same-time shape on a GPU (its delayed pass and band as one op, the band's
    gradients and the delayed pass's summed in the kernels), fp32 and bf16, against the float64 chunk form over the
    packed samples (``tests/test_triton_falcon3.py``'s check)."""
    from tests.test_triton_falcon3 import check_rows_of_samples_on_gpu

    check_rows_of_samples_on_gpu("falcon-3a", dtype, tol)
