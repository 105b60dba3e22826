"""Segments and decoding: a sequence cut in segments with the state handed over equals one pass, and the
one-token ``fast_weight_step`` equals the whole-sequence op — for every rule and backend."""

from __future__ import annotations

import pytest
import torch

from falcon_lab.kernels import RULES, fast_weight_rule, fast_weight_step
from tests.rules_util import rel_err, rule_inputs, slice_time

BACKENDS = ["recurrent", "masked", "chunk"]
STATE_FIELDS = ("S", "last_key", "x_tail", "v_tail")


def _assert_same_state(a, b, tol=1e-10):
    for field in STATE_FIELDS:
        assert rel_err(getattr(a, field), getattr(b, field)) < tol, field
    assert torch.equal(a.tail_mask, b.tail_mask)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("alignment,timing", [("shifted", "raw"), ("same_time", "rbw"), ("shifted", "rbw")])
def test_segments_equal_one_pass(rule, backend, alignment, timing):
    T, cuts = 23, (1, 2, 9, 16)  # segments of 1, 1, 7, 7 and 7 tokens
    x = rule_inputs(rule, T=T, seed=11, lam_scale=2.0)
    kw = dict(rule=rule, window=4, alignment=alignment, timing=timing, backend=backend, chunk_size=4,
              output_final_state=True)
    whole, whole_state = fast_weight_rule(**x, **kw)
    state, outs = None, []
    for start, stop in zip((0, *cuts), (*cuts, T)):
        o, state = fast_weight_rule(**slice_time(x, start, stop), initial_state=state, **kw)
        outs.append(o)
    assert rel_err(torch.cat(outs, dim=1), whole) < 1e-10
    _assert_same_state(state, whole_state)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("alignment,timing", [("shifted", "raw"), ("same_time", "rbw")])
def test_step_equals_the_whole_sequence(rule, backend, alignment, timing):
    T = 10
    x = rule_inputs(rule, T=T, seed=12, lam_scale=2.0)
    kw = dict(rule=rule, window=3, alignment=alignment, timing=timing, scale_coupled_ridge=True)
    whole, whole_state = fast_weight_rule(**x, backend=backend, output_final_state=True, **kw)
    state, outs = None, []
    for t in range(T):
        o, state = fast_weight_step(state, *(x[n][:, t] for n in ("q", "k", "v", "beta", "lam")), **kw)
        outs.append(o)
    assert rel_err(torch.stack(outs, dim=1), whole) < 1e-10
    _assert_same_state(state, whole_state)


@pytest.mark.parametrize("rule", RULES)
def test_step_continues_a_segment(rule):
    """Prefill with the whole-sequence op, then decode with steps: the generation pattern."""
    x = rule_inputs(rule, T=12, seed=13)
    kw = dict(rule=rule, window=4)
    whole, _ = fast_weight_rule(**x, **kw)
    _, state = fast_weight_rule(**slice_time(x, 0, 8), output_final_state=True, **kw)
    for t in range(8, 12):
        o, state = fast_weight_step(state, *(x[n][:, t] for n in ("q", "k", "v", "beta", "lam")), **kw)
        assert rel_err(o, whole[:, t]) < 1e-12


@pytest.mark.parametrize("rule", ["falcon-1", "falcon-3a"])
def test_bare_initial_S_starts_fresh_from_that_S(rule):
    """A bare tensor S as initial_state: the first shifted pair is still the boundary (no write, no decay)."""
    x = rule_inputs(rule, T=1, seed=14, lam_scale=5.0)
    S0 = torch.randn(2, 2, 4, 3, dtype=torch.float64)
    _, state = fast_weight_rule(**x, rule=rule, initial_state=S0, output_final_state=True)
    assert torch.equal(state.S, S0)


def test_packed_sequences_equal_separate_calls():
    x = rule_inputs("falcon-3", B=1, T=15, seed=15)
    cu = torch.tensor([0, 4, 5, 15])
    o, st = fast_weight_rule(**x, rule="falcon-3", cu_seqlens=cu, output_final_state=True)
    for n, (b, e) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist())):
        ref, ref_state = fast_weight_rule(**slice_time(x, b, e), rule="falcon-3", output_final_state=True)
        assert rel_err(o[:, b:e], ref) < 1e-12
        assert rel_err(st.S[n:n + 1], ref_state.S) < 1e-12


@pytest.mark.parametrize("rule", RULES)
@pytest.mark.parametrize("backend", ["chunk", "masked"])
def test_packed_outputs_from_fresh_states_equal_separate_calls_with_gradients(rule, backend):
    """Outputs alone from fresh states (the path padded one sequence to a row): the outputs of separate calls,
    and the gradients of every input are finite and equal to theirs (no padding leaks into them)."""
    x = rule_inputs(rule, B=1, T=15, seed=16)
    bounds = [0, 4, 5, 15]
    leaves = {n: t.clone().requires_grad_(True) for n, t in x.items()}
    o, st = fast_weight_rule(**leaves, rule=rule, backend=backend, chunk_size=4, cu_seqlens=torch.tensor(bounds))
    assert st is None
    weights = torch.randn_like(o)
    (o * weights).sum().backward()
    ref_leaves = {n: t.clone().requires_grad_(True) for n, t in x.items()}
    for b, e in zip(bounds, bounds[1:]):
        ref, _ = fast_weight_rule(**slice_time(ref_leaves, b, e), rule=rule, backend=backend, chunk_size=4)
        assert rel_err(o[:, b:e], ref) < 1e-12
        (ref * weights[:, b:e]).sum().backward()
    for n in x:
        assert torch.isfinite(leaves[n].grad).all(), n
        assert rel_err(leaves[n].grad, ref_leaves[n].grad) < 1e-10, n
