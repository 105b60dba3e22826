"""Every registered mixer: forward/backward, causality, parameter count, step ≡ forward, option errors; the
baselines against plain loops written from their papers' equations; the Falcon gates' ranges and presets."""

from __future__ import annotations

import importlib
import math

import pytest
import torch
import torch.nn.functional as F

from falcon_lab.kernels import fast_weight_rule
from falcon_lab.mixers import MIXERS, build_mixer, default_options
from falcon_lab.mixers.layers import l2_norm, rms_norm, rotary

D_MODEL, HEADS, B, L = 32, 2, 2, 12
NAMES = list(MIXERS)
RECURRENT = [n for n in NAMES if n != "transformer"]


def tiny(name: str) -> dict:
    """Options that keep a mixer tiny (Mamba-2's default state width is 128)."""
    return {"d_state": 8} if name == "mamba2" else {}


def make(name: str, dtype: torch.dtype = torch.float64, seed: int = 0, **options):
    torch.manual_seed(seed)
    return build_mixer(name, D_MODEL, HEADS, **{**tiny(name), **options}).to(dtype)


def inputs(dtype: torch.dtype = torch.float64, seed: int = 1) -> torch.Tensor:
    return torch.randn(B, L, D_MODEL, generator=torch.Generator().manual_seed(seed), dtype=dtype)


def stepped(mixer, x: torch.Tensor) -> torch.Tensor:
    cache = mixer.init_cache(x.shape[0], x.device, x.dtype)
    outs = []
    for t in range(x.shape[1]):
        y, cache = mixer.step(x[:, t], cache)
        outs.append(y)
    return torch.stack(outs, dim=1)


@pytest.mark.parametrize("name", NAMES)
def test_forward_backward(name):
    mixer = make(name, torch.float32)
    x = inputs(torch.float32).requires_grad_()
    y = mixer(x)
    assert y.shape == x.shape and torch.isfinite(y).all()
    y.square().mean().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for pname, p in mixer.named_parameters():
        assert p.grad is not None, f"{name}: {pname} gets no gradient"
        assert torch.isfinite(p.grad).all(), f"{name}: {pname} has a non-finite gradient"
        assert p.grad.abs().sum() > 0, f"{name}: {pname} has an all-zero gradient"


@pytest.mark.parametrize("name", NAMES)
def test_causal(name):
    mixer = make(name)
    x = inputs()
    t = 5
    x2 = x.clone()
    x2[:, t] += torch.randn_like(x2[:, t])
    y, y2 = mixer(x), mixer(x2)
    torch.testing.assert_close(y2[:, :t], y[:, :t], rtol=0, atol=1e-12)
    assert (y2[:, t:] - y[:, t:]).abs().max() > 1e-6  # the perturbation does reach position t onwards


@pytest.mark.parametrize("name", NAMES)
def test_parameter_count(name, record_property):
    mixer = make(name)
    count = sum(p.numel() for p in mixer.parameters())
    record_property("parameters", count)
    print(f"{name}: {count} parameters at d_model={D_MODEL}, n_heads={HEADS}")
    assert count > 0
    assert count == sum(p.numel() for _, p in mixer.named_parameters())


@pytest.mark.parametrize("name", NAMES)
def test_step_equals_forward_float64(name):
    mixer = make(name)
    x = inputs()
    torch.testing.assert_close(stepped(mixer, x), mixer(x), rtol=0, atol=1e-8)


@pytest.mark.parametrize("name", ["transformer", "falcon-1a.3", "falcon-3", "mamba2", "gated-deltanet"])
def test_step_equals_forward_float32(name):
    mixer = make(name, torch.float32)
    x = inputs(torch.float32)
    with torch.no_grad():
        torch.testing.assert_close(stepped(mixer, x), mixer(x), rtol=0, atol=1e-4)


@pytest.mark.parametrize("alignment", ["shifted", "same_time"])
@pytest.mark.parametrize("timing", ["raw", "rbw"])
@pytest.mark.parametrize("name", ["retnet", "mamba2", "deltanet", "gated-deltanet", "falcon-1", "falcon-2a",
                                  "falcon-3a"])
def test_alignment_timing_grid(name, alignment, timing):
    """The 2×2 ablation runs on every recurrent family: causal and step ≡ forward in each cell."""
    mixer = make(name, alignment=alignment, timing=timing)
    x = inputs()
    y = mixer(x)
    torch.testing.assert_close(stepped(mixer, x), y, rtol=0, atol=1e-8)
    x2 = x.clone()
    x2[:, 6] += 1.0
    torch.testing.assert_close(mixer(x2)[:, :6], y[:, :6], rtol=0, atol=1e-12)


@pytest.mark.parametrize("name", RECURRENT)
def test_chunk_backend_equals_recurrent(name):
    x = inputs()
    fast = make(name, backend="chunk", chunk_size=4)
    slow = make(name, backend="recurrent")
    torch.testing.assert_close(fast(x), slow(x), rtol=0, atol=1e-9)


def test_falcon3_chunks_shrink_with_the_window_and_compute_the_same():
    """falcon-3's chunk form keeps C·B near window_block (memory); the output and gradients do not move."""
    x = inputs().requires_grad_()
    short = make("falcon-3", backend="chunk", window=8)
    long = make("falcon-3", backend="chunk", window=8, window_block=10**6)
    assert (short.chunk_size, long.chunk_size) == (8, 64)
    assert make("falcon-3a", window=8).chunk_size == 64 and make("falcon-3", window=1).chunk_size == 64
    y_short, y_long = short(x), long(x)
    torch.testing.assert_close(y_short, y_long, rtol=0, atol=1e-10)
    g_short, = torch.autograd.grad(y_short.square().sum(), x)
    g_long, = torch.autograd.grad(y_long.square().sum(), x)
    torch.testing.assert_close(g_short, g_long, rtol=0, atol=1e-10)


def test_unknown_name_lists_the_registry():
    with pytest.raises(ValueError, match="unknown mixer 'falcon-9'; accepted: transformer, ") as err:
        build_mixer("falcon-9", D_MODEL, HEADS)
    assert "\n" not in str(err.value)
    for name in NAMES:
        assert name in str(err.value)


@pytest.mark.parametrize("name", NAMES)
def test_unknown_option_lists_accepted(name):
    with pytest.raises(ValueError, match=r"unknown option\(s\) 'not_an_option'") as err:
        build_mixer(name, D_MODEL, HEADS, not_an_option=1)
    message = str(err.value)
    assert "\n" not in message
    for option in default_options(name):
        assert option in message


@pytest.mark.parametrize("name, option, value, accepted", [
    ("falcon-1a", "qk_norm", "layernorm", "rmsnorm, l2, none"),
    ("falcon-1a", "gain", "beta", "ctx_beta, ctx_eta, const_beta"),
    ("falcon-2", "ridge", "lambda", "ctx_lambda, const_lambda"),
    ("falcon-3a", "alignment", "next", "shifted, same_time"),
    ("falcon-1", "timing", "late", "raw, rbw"),
    ("falcon-1", "backend", "cuda", "auto, recurrent, masked, chunk, triton"),
    ("retnet", "backend", "masked", "auto, recurrent, chunk, triton"),
    ("mamba2", "timing", "early", "raw, rbw"),
    ("deltanet", "alignment", "x", "shifted, same_time"),
])
def test_bad_choice_lists_accepted(name, option, value, accepted):
    with pytest.raises(ValueError, match=f"{option}={value!r}; accepted: {accepted}"):
        build_mixer(name, D_MODEL, HEADS, **{option: value})


@pytest.mark.parametrize("options", [{"beta": 2.0}, {"beta": 0.0}, {"window": 0}, {"conv": 1},
                                     {"decay_floor": 1.0}, {"lam": -0.1}, {"lam_init_max": 1.5},
                                     {"eta_max": 0}, {"beta_max": 2.5}, {"beta_max": 0.0}, {"head_dim": 0}])
def test_bad_falcon_values(options):
    with pytest.raises(ValueError, match=next(iter(options))):
        build_mixer("falcon-1a", D_MODEL, HEADS, **options)


def test_heads_must_divide_width():
    with pytest.raises(ValueError, match="not divisible by n_heads=3"):
        build_mixer("falcon-1", D_MODEL, 3)
    assert build_mixer("falcon-1", D_MODEL, 3, head_dim=8).head_dim == 8


# ---- Falcon: presets, gates and options ----

def test_falcon_presets():
    dot3 = {"qk_norm": "rmsnorm", "gain": "ctx_eta", "ridge": "ctx_lambda"}
    expected = {"falcon-1a.1": {"qk_norm": "l2", "gain": "ctx_beta", "ridge": "ctx_lambda"},
                "falcon-1a.2": {"qk_norm": "l2", "gain": "ctx_eta", "ridge": "ctx_lambda"},
                "falcon-1a.3": dot3, "falcon-3a.3": dot3, "falcon-1.3": dot3}
    for name, settings in expected.items():
        opts = default_options(name)
        assert {k: opts[k] for k in settings} == settings, name
        assert opts["alignment"] == "shifted" and opts["timing"] == "raw" and opts["backend"] == "auto"
    for rule in ("falcon-1", "falcon-2", "falcon-3", "falcon-1a", "falcon-2a", "falcon-3a"):
        assert default_options(rule) == default_options("falcon-1.3"), rule
    assert build_mixer("falcon-3a.3", D_MODEL, HEADS).rule == "falcon-3a"
    assert build_mixer("falcon-1.3", D_MODEL, HEADS).rule == "falcon-1"
    assert build_mixer("falcon-1a.1", D_MODEL, HEADS, qk_norm="rmsnorm").opts.qk_norm == "rmsnorm"


@pytest.mark.parametrize("name, gain_shape", [("falcon-1a", (B, L, HEADS)), ("falcon-2", (B, L, HEADS, 16))])
def test_falcon_gate_ranges(name, gain_shape):
    h = 3.0 * inputs()  # wide pre-activations, short of float saturation at the ends of (0, 2)
    beta, lam = make(name, gain="ctx_beta")._gates(h)
    assert beta.shape == gain_shape and lam.shape == (B, L, HEADS)
    assert ((beta > 0) & (beta < 2)).all() and (lam >= 0).all() and (lam <= 1).all()
    eta_mixer = make(name, eta_max=2.0)
    eta, _ = eta_mixer._gates(h)
    assert eta_mixer.energy_ref == 16.0  # QK-RMSNorm: ‖x‖² ≤ Dk
    assert ((eta > 0) & (eta * 16.0 < 2.0)).all()
    assert make(name, qk_norm="l2").energy_ref == 1.0
    const, _ = make(name, gain="const_beta", beta=1.5)._gates(h)
    assert torch.all(const == 1.5)


def test_gain_range_sets_where_the_transition_eigenvalue_can_go() -> None:
    """beta_max bounds ctxβ's gain (Falcon) and DeltaNet's β: the transition's eigenvalue along the written key is
    1 − β, in [0, 1) for beta_max = 1 and down to −1 for beta_max = 2; a saturated gate reaches the bound."""
    torch.manual_seed(0)
    h = 8.0 * torch.randn(2, 8, D_MODEL)  # large inputs drive the gates towards both ends (float32 may reach them)
    for beta_max in (1.0, 2.0):
        falcon = build_mixer("falcon-1", D_MODEL, HEADS, gain="ctx_beta", beta_max=beta_max)
        beta, _ = falcon._gates(h)
        assert ((beta >= 0) & (beta <= beta_max)).all() and beta.max() > 0.9 * beta_max
        delta = build_mixer("deltanet", D_MODEL, HEADS, beta_max=beta_max)
        x = torch.randn(2, 8, D_MODEL)
        with torch.no_grad():
            delta.b_proj.weight.mul_(1000.0)
        *_, dbeta = delta._features(x, delta.q_proj(x), delta.k_proj(x), delta.v_proj(x))
        assert ((dbeta >= 0) & (dbeta <= beta_max)).all() and dbeta.max() > 0.9 * beta_max
    with pytest.raises(ValueError, match="beta_max"):
        build_mixer("deltanet", D_MODEL, HEADS, beta_max=3.0)
    y = build_mixer("deltanet", D_MODEL, HEADS, beta_max=2.0)(torch.randn(2, 8, D_MODEL))
    assert torch.isfinite(y).all()


def saturated_gates(name: str, sigma: float = 0.99, lam_bar: float = 0.9, **options):
    """A Falcon mixer whose gates ignore the input: σ(gain) = ``sigma``, λ̄ = ``lam_bar`` (lam_scale 1)."""
    mixer = make(name, **options)
    with torch.no_grad():
        mixer.gain_proj.weight.zero_()
        mixer.gain_offset.fill_(math.log(sigma / (1 - sigma)))
        mixer.lam_proj.weight.zero_()
        mixer.lam_offset.fill_(math.log(lam_bar / (1 - lam_bar)))
    return mixer


@pytest.mark.parametrize("name", ["falcon-1", "falcon-2", "falcon-3", "falcon-1a", "falcon-2a", "falcon-3a"])
def test_ctx_eta_bound_keeps_the_regression_eigenvalue_above_minus_one(name: str) -> None:
    """ctxη with the scale-coupled ridge: a regression rule's eigenvalue along x is γ − η‖x‖², γ = 1 − min(ηλ̄‖x‖²,
    1 − ε_γ). Bounded by the key energy alone (``energy``) a saturated gate with λ̄ = 0.9 puts it near ε_γ − 2;
    bounded with the ridge (``ridge``, the regression rules' ``auto``) it stays above −1, as ctxβ's 1 − β does."""
    E, floor = 16.0, 1e-3  # QK-RMSNorm's key energy at head_dim 16, the default decay floor
    regression = name in ("falcon-1", "falcon-2", "falcon-3")
    assert make(name).eta_bound == ("ridge" if regression else "energy")

    @torch.no_grad()
    def lowest_eigenvalue(mixer) -> float:
        eta, lam = mixer._gates(torch.zeros(1, 1, D_MODEL, dtype=torch.float64))
        lam = lam[..., None] if mixer.per_channel else lam
        carry = 1 - torch.clamp(eta * lam * E, max=1 - floor)
        return float((carry - eta * E).min())

    assert lowest_eigenvalue(saturated_gates(name, eta_bound="energy")) < -1.9
    ridge = lowest_eigenvalue(saturated_gates(name, eta_bound="ridge"))
    assert -1.0 < ridge < -0.9  # η(E + λ) = 0.99·2: the bound is reached, not passed
    with pytest.raises(ValueError, match="eta_bound"):
        make(name, eta_bound="both")


def test_ctx_eta_with_the_ridge_bound_keeps_the_state_finite_on_a_repeated_key() -> None:
    """The same key written 400 times by falcon-1.3 with saturated gates (σ = 0.99, λ̄ = 0.9): bounded by the
    key energy alone the state grows by |ε_γ − 1.98| a token and overflows float32; with the ridge bound (the
    default) it settles."""
    torch.manual_seed(0)
    T, H, D = 400, HEADS, D_MODEL // HEADS
    q = rms_norm(torch.randn(1, T, H, D), 1e-6)
    k = rms_norm(torch.randn(1, 1, H, D), 1e-6).expand(1, T, H, D).contiguous()
    v = torch.randn(1, T, H, D)
    states = {}
    for bound in ("energy", "ridge"):
        mixer = saturated_gates("falcon-1.3", eta_bound=bound).float()
        with torch.no_grad():
            eta, lam = mixer._gates(torch.zeros(1, T, D_MODEL))
        _, state = fast_weight_rule(q, k, v, lam=lam, eta=eta, output_final_state=True, backend="chunk",
                                    **mixer._rule_options())
        states[bound] = state.S
    assert not torch.isfinite(states["energy"]).all()
    assert torch.isfinite(states["ridge"]).all() and states["ridge"].abs().max() < 100 * v.abs().max()


def test_falcon_initial_gates():
    """At zero input: β = 1 (ctxβ), η·E_ref = 1 (ctxη), λ̄ log-spaced over heads in [lam_init_min, max]."""
    torch.manual_seed(0)
    mixer = build_mixer("falcon-1a", D_MODEL, 4, gain="ctx_beta", lam_init_min=1e-3, lam_init_max=1e-1)
    beta, lam = mixer._gates(torch.zeros(1, 1, D_MODEL))
    torch.testing.assert_close(beta, torch.ones_like(beta))
    torch.testing.assert_close(lam[0, 0], torch.tensor([1e-3, 1e-3 ** (2 / 3) * 1e-1 ** (1 / 3),
                                                        1e-3 ** (1 / 3) * 1e-1 ** (2 / 3), 1e-1]))
    eta, _ = build_mixer("falcon-1a", D_MODEL, 4)._gates(torch.zeros(1, 1, D_MODEL))
    torch.testing.assert_close(eta * 8.0, torch.ones_like(eta))


@pytest.mark.parametrize("options", [
    {"v_norm": True}, {"conv": False}, {"qk_norm": "none"}, {"output_gate": False},
    {"gain": "const_beta", "beta": 1.5, "ridge": "const_lambda", "lam": 0.1},
    {"scale_coupled_ridge": False, "ridge": "const_lambda", "lam": 2.0}, {"window": 2, "conv_size": 2},
])
@pytest.mark.parametrize("name", ["falcon-2", "falcon-3"])
def test_falcon_options_run_and_step(name, options):
    mixer = make(name, **options)
    x = inputs()
    y = mixer(x)
    assert torch.isfinite(y).all()
    torch.testing.assert_close(stepped(mixer, x), y, rtol=0, atol=1e-8)


def test_falcon_options_change_the_output():
    x = inputs()
    base = make("falcon-1a")(x)
    for options in ({"v_norm": True}, {"qk_norm": "l2"}, {"gain": "ctx_beta"}, {"alignment": "same_time"},
                    {"timing": "rbw"}, {"ridge": "const_lambda"}):
        assert (make("falcon-1a", **options)(x) - base).abs().max() > 1e-6, options


# ---- baselines against plain loops from their papers ----

def test_retnet_matches_retention_loop():
    m = make("retnet")
    x = inputs()
    H, dk, dv = HEADS, m.dk, m.dv
    gammas = 1 - 2.0 ** (-5 - torch.arange(H, dtype=torch.float64))
    torch.testing.assert_close(m.log_decay.exp(), gammas)
    pos = torch.arange(L)
    q = rotary(m.q_proj(x).view(B, L, H, dk), pos, 10000.0)
    k = rotary(m.k_proj(x).view(B, L, H, dk), pos, 10000.0)
    v = m.v_proj(x).view(B, L, H, dv)
    S = torch.zeros(B, H, dk, dv, dtype=torch.float64)
    outs = []
    for t in range(L):
        S = gammas[None, :, None, None] * S + k[:, t, :, :, None] * v[:, t, :, None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]) / math.sqrt(dk))
    o = rms_norm(torch.stack(outs, 1), 1e-6).flatten(-2)
    torch.testing.assert_close(m(x), m.o_proj(o * F.silu(m.g_proj(x))), rtol=0, atol=1e-10)


def test_mamba2_matches_ssd_loop():
    m = make("mamba2")
    x = inputs()
    d, N, H, P = m.d_inner, m.d_state, m.n_heads, m.head_dim
    z, xBC, dt = m.in_proj(x).split([d, d + 2 * N, H], dim=-1)
    xBC = F.silu(F.conv1d(xBC.transpose(1, 2), m.conv.conv.weight, padding=3, groups=xBC.shape[-1])[..., :L])
    xs, Bm, Cm = xBC.transpose(1, 2).split([d, N, N], dim=-1)
    xs = xs.view(B, L, H, P)
    delta = F.softplus(dt + m.dt_bias)
    A = -torch.exp(m.A_log)
    h = torch.zeros(B, H, N, P, dtype=torch.float64)
    ys = []
    for t in range(L):
        h = torch.exp(delta[:, t] * A)[..., None, None] * h \
            + delta[:, t, :, None, None] * Bm[:, t, None, :, None] * xs[:, t, :, None, :]
        ys.append(torch.einsum("bhnp,bn->bhp", h, Cm[:, t]) + m.D[:, None] * xs[:, t])
    y = torch.stack(ys, 1).flatten(-2) * F.silu(z)
    ref = m.out_proj(rms_norm(y, 1e-5) * m.norm_weight)
    torch.testing.assert_close(m(x), ref, rtol=0, atol=1e-10)


@pytest.mark.parametrize("name", ["deltanet", "gated-deltanet"])
def test_deltanet_matches_delta_loop(name):
    m = make(name)
    x = inputs()
    H, dk, dv = HEADS, m.dk, m.dv
    q, k, v = (conv(p(x)) for conv, p in zip(m.convs, (m.q_proj, m.k_proj, m.v_proj)))
    q, k = l2_norm(q.view(B, L, H, dk), 1e-6), l2_norm(k.view(B, L, H, dk), 1e-6)
    v = v.view(B, L, H, dv)
    beta = torch.sigmoid(m.b_proj(x))
    gate = torch.ones_like(beta)
    if name == "gated-deltanet":
        gate = torch.exp(-torch.exp(m.A_log) * F.softplus(m.a_proj(x) + m.dt_bias))
    S = torch.zeros(B, H, dk, dv, dtype=torch.float64)
    eye = torch.eye(dk, dtype=torch.float64)
    outs = []
    for t in range(L):
        kt, bt = k[:, t], beta[:, t, :, None, None]
        S = gate[:, t, :, None, None] * ((eye - bt * kt[..., :, None] * kt[..., None, :]) @ S) \
            + bt * kt[..., :, None] * v[:, t, :, None, :]
        outs.append(torch.einsum("bhkv,bhk->bhv", S, q[:, t]) / math.sqrt(dk))
    o = m.o_norm(torch.stack(outs, 1))
    if m.g_proj is not None:
        o = o * F.silu(m.g_proj(x)).view(B, L, H, dv)
    torch.testing.assert_close(m(x), m.o_proj(o.flatten(-2)), rtol=0, atol=1e-10)
    assert (m.g_proj is not None) == (name == "gated-deltanet")
    assert m.dv == (2 * dk if name == "gated-deltanet" else dk)


def test_transformer_matches_softmax_attention():
    m = make("transformer")
    x = inputs()
    H, D = HEADS, m.head_dim
    pos = torch.arange(L)
    q = rotary(m.q_proj(x).view(B, L, H, D), pos, 10000.0).transpose(1, 2)
    k = rotary(m.k_proj(x).view(B, L, H, D), pos, 10000.0).transpose(1, 2)
    v = m.v_proj(x).view(B, L, H, D).transpose(1, 2)
    scores = q @ k.transpose(-1, -2) / math.sqrt(D)
    scores = scores.masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1), float("-inf"))
    o = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, L, -1)
    torch.testing.assert_close(m(x), m.o_proj(o), rtol=0, atol=1e-10)


def test_transformer_nope_has_no_position_signal():
    """rope=False: plain causal softmax attention, so a token's output depends on what precedes it, not
    in which order: swapping the first two tokens leaves the last output unchanged (RoPE's changes)."""
    m = make("transformer", rope=False)
    x = inputs()
    H, D = HEADS, m.head_dim
    q, k, v = (p(x).view(B, L, H, D).transpose(1, 2) for p in (m.q_proj, m.k_proj, m.v_proj))
    scores = (q @ k.transpose(-1, -2) / math.sqrt(D)).masked_fill(torch.ones(L, L, dtype=torch.bool).triu(1),
                                                                  float("-inf"))
    o = (scores.softmax(-1) @ v).transpose(1, 2).reshape(B, L, -1)
    torch.testing.assert_close(m(x), m.o_proj(o), rtol=0, atol=1e-10)
    torch.testing.assert_close(stepped(m, x), m(x), rtol=0, atol=1e-10)
    swapped = x[:, [1, 0, *range(2, L)]]
    torch.testing.assert_close(m(swapped)[:, -1], m(x)[:, -1], rtol=0, atol=1e-10)
    rope = make("transformer")
    assert not torch.allclose(rope(swapped)[:, -1], rope(x)[:, -1])
    with pytest.raises(ValueError, match="rope must be True or False, got 'no'"):
        build_mixer("transformer", D_MODEL, HEADS, rope="no")


OPS = {"falcon": "fast_weight_rule", "retnet": "decayed_linear_attention", "mamba2": "decayed_linear_attention",
       "deltanet": "gated_delta_rule"}


@pytest.mark.parametrize("name", RECURRENT)
def test_ops_run_without_autocast(name, monkeypatch):
    """Under bf16 autocast the projections run in bf16 while the fast-weight ops see autocast off, so their
    state, solves and falcon-3's eigenvalue problem (no bf16 CUDA kernel) stay in fp32."""
    module_name = "falcon" if name.startswith("falcon") else name.replace("gated-", "")
    module = importlib.import_module(f"falcon_lab.mixers.{module_name}")
    op = getattr(module, OPS[module_name])
    seen = []

    def spy(*args, **kwargs):
        seen.append(torch.is_autocast_enabled("cpu"))
        return op(*args, **kwargs)

    monkeypatch.setattr(module, OPS[module_name], spy)
    mixer = make(name, torch.float32)
    x = inputs(torch.float32).requires_grad_()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        y = mixer(x)
        assert torch.is_autocast_enabled("cpu")
    assert seen == [False]
    assert y.dtype == torch.bfloat16
    y.float().square().mean().backward()
    assert torch.isfinite(y).all() and torch.isfinite(x.grad).all()


@pytest.mark.parametrize("name", ["falcon-1.3", "falcon-2a"])
def test_rule_dtype_float32_hands_the_rule_float32_inputs(name, monkeypatch):
    """``rule_dtype="float32"`` casts bf16 q, k, v and gates to float32 before the rule (the fused kernels then
    multiply at about fp32, not with bf16 operands); ``"input"`` leaves them bf16; float32 models are untouched."""
    from falcon_lab.mixers import falcon

    seen = []
    real = falcon.fast_weight_rule

    def spy(q, k, v, **kw):
        seen.append((q.dtype, k.dtype, v.dtype, kw["lam"].dtype))
        return real(q, k, v, **kw)

    monkeypatch.setattr(falcon, "fast_weight_rule", spy)
    x = inputs(torch.float32)
    for rule_dtype, want in (("input", torch.bfloat16), ("float32", torch.float32)):
        seen.clear()
        mixer = make(name, torch.float32, rule_dtype=rule_dtype, backend="chunk")
        with torch.autocast("cpu", torch.bfloat16):
            y = mixer(x)
        assert {d for s in seen for d in s[:3]} == {want} and torch.isfinite(y).all()
        y.float().sum().backward()  # the cast keeps the graph: gradients reach the projections
        assert mixer.q_proj.weight.grad is not None
    y32 = make(name, torch.float32, rule_dtype="float32", backend="chunk")(x)
    torch.testing.assert_close(y32, make(name, torch.float32, backend="chunk")(x), rtol=0, atol=0)
    with pytest.raises(ValueError, match="rule_dtype"):
        make(name, rule_dtype="bf16")


@pytest.mark.parametrize("name", ["falcon-1a.3", "falcon-1.3", "falcon-3a.3", "deltanet", "retnet"])
@pytest.mark.parametrize(("timing", "alignment"), [("raw", "shifted"), ("raw", "same_time"), ("rbw", "shifted"),
                                                   ("rbw", "same_time")])
def test_every_cell_of_the_alignment_ablation_computes_the_same_in_chunks(name, timing, alignment):
    """The four cells of the 2x2 ablation, short convolutions included: the chunk form is the recurrent one."""
    x = inputs()
    opts = {"timing": timing, "alignment": alignment}
    if name == "retnet":
        fast, slow = make(name, backend="chunk", **opts), make(name, backend="recurrent", **opts)
    else:
        fast = make(name, backend="chunk", chunk_size=4, **opts)
        slow = make(name, backend="recurrent", **opts)
    torch.testing.assert_close(fast(x), slow(x), rtol=0, atol=1e-9)


def test_rotary_table_matches_rotary():
    """Rotary's kept cosines and sines rotate as `rotary` computes them: from the start, from an offset, at a
    sample's own places, and past the table (where it computes them)."""
    from falcon_lab.mixers.layers import Rotary

    torch.manual_seed(0)
    rope = Rotary(8, 10000.0)
    x = torch.randn(2, 6, 3, 8)
    torch.testing.assert_close(rope(x), rotary(x, torch.arange(6), 10000.0))
    torch.testing.assert_close(rope(x, start=5), rotary(x, torch.arange(5, 11), 10000.0))
    places = torch.tensor([[0, 1, 2, 0, 1, 0], [0, 0, 1, 2, 3, 4]])
    torch.testing.assert_close(rope(x, places), rotary(x, places, 10000.0))
    far = Rotary.TABLE - 2
    torch.testing.assert_close(rope(x, start=far), rotary(x, torch.arange(far, far + 6), 10000.0))
    assert not any(name.endswith(("cos", "sin")) for name in make("transformer").state_dict())
