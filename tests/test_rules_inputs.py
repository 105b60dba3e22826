"""Bad input gets a ValueError that names the argument."""

from __future__ import annotations

import pytest
import torch

from falcon_lab.kernels import FastWeightState, fast_weight_rule, fast_weight_step
from tests.rules_util import rule_inputs


def _call(rule="falcon-1", **overrides):
    x = rule_inputs(rule, T=5, seed=21)
    opts = {k: overrides.pop(k) for k in list(overrides) if k not in x}
    x.update(overrides)
    return fast_weight_rule(**x, rule=rule, **opts)


@pytest.mark.parametrize("overrides,match", [
    (dict(rule="falcon-4"), "rule"),
    (dict(alignment="sideways"), "alignment"),
    (dict(timing="later"), "timing"),
    (dict(backend="cuda-magic"), "backend"),
    (dict(window=0), "window"),
    (dict(window=2.5), "window"),
    (dict(eps=-1.0), "eps"),
    (dict(decay_floor=0.0), "decay_floor"),
    (dict(decay_floor=1.0), "decay_floor"),
    (dict(chunk_size=0), "chunk_size"),
])
def test_bad_options(overrides, match):
    with pytest.raises(ValueError, match=match):
        _call(**overrides)


def _bad(name, value):
    return {name: value}


@pytest.mark.parametrize("name,make,match", [
    ("q", lambda x: x["q"][0], "q"),
    ("q", lambda x: x["q"][:, :0], "T = 0"),
    ("k", lambda x: x["k"][:, :, :, :2], "k"),
    ("v", lambda x: x["v"][:, :4], "v"),
    ("beta", lambda x: x["beta"][..., None], "beta"),
    ("lam", lambda x: x["lam"][:, :, :1], "lam"),
    ("k", lambda x: x["k"].float(), "dtype"),
    ("q", lambda x: x["q"].long(), "q must be a floating-point"),
    ("lam", lambda x: x["lam"].long(), "lam must be a floating-point"),
    ("v", lambda x: x["v"].tolist(), "v"),
])
def test_bad_tensors(name, make, match):
    x = rule_inputs("falcon-1", T=5, seed=22)
    x[name] = make(x)
    with pytest.raises(ValueError, match=match):
        fast_weight_rule(**x, rule="falcon-1")


def test_per_channel_beta_shape_is_checked():
    x = rule_inputs("falcon-2", T=5, seed=23)
    x["beta"] = x["beta"][..., :2]
    with pytest.raises(ValueError, match="beta"):
        fast_weight_rule(**x, rule="falcon-2")


@pytest.mark.parametrize("value,match", [(2.0, "beta"), (0.0, "beta"), (-0.5, "beta"), (2.5, "beta")])
def test_beta_outside_0_2_when_validating(value, match):
    x = rule_inputs("falcon-1a", T=5, seed=24)
    x["beta"][0, 2, 1] = value
    fast_weight_rule(**x, rule="falcon-1a")  # no check without validation
    with pytest.raises(ValueError, match=match):
        fast_weight_rule(**x, rule="falcon-1a", validate=True)


def test_the_step_is_driven_by_beta_or_by_eta_never_both():
    """beta is always the gain; the step size η itself (the ctxη reading) comes as eta, checked by that name."""
    x = rule_inputs("falcon-1", T=5, seed=28)
    with pytest.raises(ValueError, match="exactly one of beta .* and eta .*; got both"):
        fast_weight_rule(**x, eta=x["beta"], rule="falcon-1")
    beta = x.pop("beta")
    with pytest.raises(ValueError, match="exactly one of beta .* and eta .*; got neither"):
        fast_weight_rule(**x, rule="falcon-1")
    with pytest.raises(ValueError, match="eta has shape"):
        fast_weight_rule(**x, eta=beta[..., None], rule="falcon-1")
    with pytest.raises(ValueError, match=r"eta \(the step size η\) must be >= 0"):
        fast_weight_rule(**x, eta=-beta, rule="falcon-1", validate=True)
    fast_weight_rule(**x, eta=2.5 * beta, rule="falcon-1", validate=True)  # η is not a gain: no (0, 2) bound


@pytest.mark.parametrize("rule", ["falcon-1", "falcon-2a"])
def test_eta_is_the_step_size_itself(rule):
    """eta=η runs the rule with the step η: the same as the gain β = η (‖x‖² + λ + ε), token by token and in a
    step."""
    x = rule_inputs(rule, T=6, seed=29, beta_range=(0.05, 0.3))
    energy = (x["k"] ** 2).sum(-1)
    scale = energy + x["lam"] + 1e-6
    beta = x["beta"] * (scale[..., None] if x["beta"].dim() == 4 else scale)
    opts = dict(rule=rule, alignment="same_time", eps=1e-6)
    o_eta, _ = fast_weight_rule(x["q"], x["k"], x["v"], lam=x["lam"], eta=x["beta"], **opts)
    o_beta, _ = fast_weight_rule(x["q"], x["k"], x["v"], beta, x["lam"], **opts)
    assert torch.allclose(o_eta, o_beta, rtol=1e-10, atol=1e-12)
    o_t, _ = fast_weight_step(None, *(x[n][:, 0] for n in ("q", "k", "v")), lam_t=x["lam"][:, 0],
                              eta_t=x["beta"][:, 0], **opts)
    assert torch.allclose(o_t, o_eta[:, 0], rtol=1e-10, atol=1e-12)


def test_negative_or_nan_lambda_when_validating():
    x = rule_inputs("falcon-1", T=5, seed=25)
    x["lam"][0, 1, 0] = -1.0
    with pytest.raises(ValueError, match="lam"):
        fast_weight_rule(**x, rule="falcon-1", validate=True)
    x["lam"][0, 1, 0] = float("nan")
    with pytest.raises(ValueError, match="lam"):
        fast_weight_rule(**x, rule="falcon-1", validate=True)


def test_initial_state_from_another_window_is_refused():
    x = rule_inputs("falcon-3", T=5, seed=26)
    _, state = fast_weight_rule(**x, rule="falcon-3", window=4, output_final_state=True)
    with pytest.raises(ValueError, match="x_tail"):
        fast_weight_rule(**x, rule="falcon-3", window=2, initial_state=state)
    with pytest.raises(ValueError, match="initial_state"):
        fast_weight_rule(**x, rule="falcon-3", initial_state=torch.zeros(3))
    with pytest.raises(ValueError, match="initial_state"):
        fast_weight_rule(**x, rule="falcon-3", initial_state=(1, 2))


def test_step_checks_its_inputs():
    x = rule_inputs("falcon-1", T=1, seed=27)
    with pytest.raises(ValueError, match="rule"):
        fast_weight_step(None, *(x[n][:, 0] for n in ("q", "k", "v", "beta", "lam")), rule="falcon")
    with pytest.raises(ValueError, match="k"):
        fast_weight_step(None, x["q"][:, 0], x["k"][:, 0, :1], x["v"][:, 0], x["beta"][:, 0], x["lam"][:, 0],
                         rule="falcon-1")
    assert isinstance(fast_weight_step(None, *(x[n][:, 0] for n in ("q", "k", "v", "beta", "lam")),
                                       rule="falcon-1")[1], FastWeightState)


@pytest.mark.parametrize("cu,match", [
    (torch.tensor([0, 3]), "rise strictly from 0 to T"),
    (torch.tensor([0, 3, 3, 5]), "rise strictly"),
    (torch.tensor([0.0, 5.0]), "integer"),
])
def test_bad_cu_seqlens(cu, match):
    x = rule_inputs("falcon-1", B=1, T=5, seed=28)
    with pytest.raises(ValueError, match=match):
        fast_weight_rule(**x, rule="falcon-1", cu_seqlens=cu)


def test_autocast_does_not_reach_inside_the_op():
    """Under bf16 autocast the op still computes in fp32: the same result as without autocast."""
    x = {k: v.float() for k, v in rule_inputs("falcon-3", T=9, seed=29).items()}
    ref, _ = fast_weight_rule(**x, rule="falcon-3", backend="chunk")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = fast_weight_rule(**x, rule="falcon-3", backend="chunk")
    assert out.dtype == torch.float32 and torch.allclose(out, ref, rtol=1e-5, atol=1e-6)


def test_auto_backend_picks_the_fused_kernels_only_where_they_apply():
    from types import SimpleNamespace

    from falcon_lab.kernels.common.config import RuleConfig
    from falcon_lab.kernels.falcon.dispatch import auto_backend

    def tensor(cuda=True, dtype=torch.bfloat16, d=64):
        return SimpleNamespace(is_cuda=cuda, dtype=dtype, shape=(1, 8, 2, d))

    def pick(rule="falcon-1", chunk=64, floor=1e-3, packed=False, window=4, **kw):
        return auto_backend(tensor(**kw), tensor(**kw), RuleConfig(rule=rule, decay_floor=floor, window=window),
                            chunk, packed=packed)

    assert pick() == "triton" and pick(rule="falcon-2a") == "triton"
    assert pick(cuda=False) == "chunk"
    assert pick(dtype=torch.float64) == "chunk"
    assert pick(rule="falcon-3") == "triton" and pick(rule="falcon-3a") == "triton"
    assert pick(rule="falcon-3", window=65) == "chunk"  # past FUSED_MAX_WINDOW slots a chunk
    assert pick(rule="falcon-3a", packed=True) == "triton" and pick(rule="falcon-1a", packed=True) == "triton"
    assert pick(rule="falcon-3", packed=True) == "triton"  # packed sequences one to a row (falcon_lab.kernels.falcon.api)
    assert pick(d=512) == "chunk" and pick(chunk=48) == "chunk"
    assert pick(rule="falcon-2a", floor=1e-4) == "chunk" and pick(rule="falcon-1a", floor=1e-4) == "triton"


def test_auto_backend_on_the_cpu_is_the_chunk_form():
    x = rule_inputs("falcon-2", T=9, seed=30)
    auto, _ = fast_weight_rule(**x, rule="falcon-2", backend="auto")
    chunk, _ = fast_weight_rule(**x, rule="falcon-2", backend="chunk")
    assert torch.equal(auto, chunk)
