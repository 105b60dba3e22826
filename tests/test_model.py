"""The language model: config validation, forward/backward, causality, generation ≡ forward for every mixer,
parameter counting, weight-decay and μP learning-rate groups, initialisation."""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from falcon_lab.mixers import MIXERS, LanguageModel, LMConfig

V, D_MODEL, HEADS, LAYERS, B, L = 37, 32, 2, 2, 2, 12


def config(mixer: str = "transformer", **overrides) -> LMConfig:
    options = {"d_state": 8} if mixer == "mamba2" else {}
    base = {"vocab_size": V, "d_model": D_MODEL, "n_layers": LAYERS, "n_heads": HEADS, "mixer": mixer,
            "mixer_options": options}
    return LMConfig(**{**base, **overrides})


def model(mixer: str = "transformer", dtype: torch.dtype = torch.float64, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    return LanguageModel(config(mixer, **overrides)).to(dtype)


def tokens(seed: int = 1, length: int = L) -> torch.Tensor:
    return torch.randint(0, V, (B, length), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("mixer", ["transformer", "falcon-1a.3", "falcon-2", "mamba2", "gated-deltanet"])
def test_forward_backward(mixer):
    lm = model(mixer, torch.float32)
    ids = tokens()
    logits = lm(ids)
    assert logits.shape == (B, L, V) and torch.isfinite(logits).all()
    loss = torch.nn.functional.cross_entropy(logits[:, :-1].reshape(-1, V), ids[:, 1:].reshape(-1))
    loss.backward()
    for name, p in lm.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


@pytest.mark.parametrize("mixer", ["transformer", "falcon-3a.3", "retnet"])
def test_causal(mixer):
    lm = model(mixer)
    ids = tokens()
    ids2 = ids.clone()
    ids2[:, 7] = (ids2[:, 7] + 1) % V
    a, b = lm(ids), lm(ids2)
    torch.testing.assert_close(b[:, :7], a[:, :7], rtol=0, atol=1e-12)
    assert (b[:, 7:] - a[:, 7:]).abs().max() > 1e-6


@pytest.mark.parametrize("mixer", list(MIXERS))
def test_step_equals_forward(mixer):
    lm = model(mixer)
    ids = tokens()
    cache = lm.init_cache(B)
    outs = []
    for t in range(L):
        logits, cache = lm.step(ids[:, t], cache)
        outs.append(logits)
    torch.testing.assert_close(torch.stack(outs, 1), lm(ids), rtol=0, atol=1e-8)


def test_generate_greedy_is_consistent_with_forward():
    lm = model("falcon-1a.3")
    prompt = tokens(length=5)
    new = lm.generate_greedy(prompt, 4)
    assert new.shape == (B, 4)
    full = torch.cat([prompt, new], dim=1)
    torch.testing.assert_close(lm(full)[:, 4:-1].argmax(-1), new)


def test_parameter_count():
    tied = model("falcon-1a.3")
    total = tied.num_parameters()
    print(f"falcon-1a.3 LM: {total} parameters (V={V}, d={D_MODEL}, layers={LAYERS})")
    assert total > 0
    assert total == sum(p.numel() for p in set(tied.parameters()))
    assert tied.num_parameters(exclude_embeddings=True) == total - V * D_MODEL
    untied = model("falcon-1a.3", tie_embeddings=False)
    assert untied.num_parameters() == total + V * D_MODEL


def test_ffn_hidden():
    assert config(d_model=768, n_heads=12).mlp_hidden == 2048  # LLaMA: 8/3·d rounded up to 64
    assert config().mlp_hidden == 128
    lm = model(ffn_hidden=0)
    assert all(block.mlp is None for block in lm.blocks)
    assert model(ffn_hidden=48).blocks[0].mlp.up.out_features == 48


def test_no_bias_anywhere():
    for mixer in MIXERS:
        lm = model(mixer)
        for name, module in lm.named_modules():
            if isinstance(module, (nn.Linear, nn.Conv1d)):
                assert module.bias is None, f"{mixer}: {name} has a bias"


@pytest.mark.parametrize("mixer", ["transformer", "falcon-1a.3", "mamba2", "gated-deltanet"])
def test_no_decay_names(mixer):
    lm = model(mixer)
    no_decay = set(lm.no_decay_parameter_names())
    for name, p in lm.named_parameters():
        assert (name in no_decay) == (p.dim() < 2), name
    assert "norm.weight" in no_decay and "blocks.0.mixer_norm.weight" in no_decay
    assert "embed.weight" not in no_decay
    if mixer == "mamba2":
        assert {"blocks.0.mixer.A_log", "blocks.0.mixer.dt_bias", "blocks.0.mixer.D"} <= no_decay
    if mixer == "falcon-1a.3":
        assert {"blocks.0.mixer.gain_offset", "blocks.0.mixer.lam_offset"} <= no_decay


@pytest.mark.parametrize("mup", [False, True])
def test_parameter_groups(mup):
    lm = model("falcon-1a.3", mup=mup, mup_base_width=8)
    groups = lm.parameter_groups(lr=1e-3, weight_decay=0.1)
    names = [n for g in groups for n in g["names"]]
    assert sorted(names) == sorted(n for n, _ in lm.named_parameters())  # each parameter exactly once
    by_name = {n: g for g in groups for n in g["names"]}
    hidden_mult = 8 / D_MODEL if mup else 1.0
    assert by_name["blocks.0.mixer.q_proj.weight"]["lr"] == pytest.approx(1e-3 * hidden_mult)
    assert by_name["blocks.1.mlp.down.weight"]["lr_mult"] == pytest.approx(hidden_mult)
    assert by_name["embed.weight"]["lr_mult"] == 1.0 and by_name["embed.weight"]["weight_decay"] == 0.1
    assert by_name["norm.weight"]["weight_decay"] == 0.0 and by_name["norm.weight"]["lr_mult"] == 1.0
    optimizer = torch.optim.AdamW(groups, betas=(0.9, 0.95))
    before = lm.embed.weight.detach().clone()
    lm(tokens()).logsumexp(-1).mean().backward()
    optimizer.step()
    assert not torch.equal(before, lm.embed.weight)


def test_mup_is_neutral_at_the_base_width():
    plain = model("falcon-1a.3", mup=False)
    scaled = model("falcon-1a.3", mup=True, mup_base_width=D_MODEL)
    ids = tokens()
    torch.testing.assert_close(scaled(ids), plain(ids), rtol=0, atol=0)


def test_mup_scales_logits_and_init():
    torch.manual_seed(0)
    cfg = LMConfig(vocab_size=V, d_model=256, n_layers=2, n_heads=4, mup=True, mup_base_width=64)
    lm = LanguageModel(cfg)
    assert lm.logit_scale == pytest.approx(64 / 256)
    std = lm.blocks[0].mixer.q_proj.weight.std().item()
    assert std == pytest.approx(0.02 * math.sqrt(64 / 256), rel=0.05)
    out_std = lm.blocks[0].mixer.o_proj.weight.std().item()
    assert out_std == pytest.approx(0.02 * math.sqrt(64 / 256) / math.sqrt(4), rel=0.05)
    down_std = lm.blocks[0].mlp.down.weight.std().item()
    assert down_std == pytest.approx(0.02 * math.sqrt(64 / 256) / math.sqrt(4), rel=0.05)
    assert lm.embed.weight.std().item() == pytest.approx(0.02, rel=0.05)
    plain = LanguageModel(LMConfig(vocab_size=V, d_model=256, n_layers=2, n_heads=4))
    assert plain.blocks[0].mixer.q_proj.weight.std().item() == pytest.approx(0.02, rel=0.05)
    assert plain.logit_scale == 1.0


def test_config_round_trip():
    cfg = config("falcon-3a", mixer_options={"window": 2}, mup=True)
    assert LMConfig.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize("overrides, match", [
    ({"mixer": "lstm"}, r"LMConfig.mixer='lstm' is not a registered mixer; accepted: transformer, "),
    ({"d_model": 0}, "LMConfig.d_model must be an integer >= 1"),
    ({"n_layers": 1.5}, "LMConfig.n_layers must be an integer >= 1"),
    ({"ffn_hidden": -1}, "LMConfig.ffn_hidden must be None"),
    ({"mixer_options": ["window"]}, "LMConfig.mixer_options must be a dict"),
    ({"norm_eps": 0}, "LMConfig.norm_eps must be a number > 0"),
    ({"mup": 1}, "LMConfig.mup must be True or False"),
])
def test_config_errors(overrides, match):
    with pytest.raises(ValueError, match=match):
        config(**overrides)


def test_bad_mixer_option_fails_at_construction():
    with pytest.raises(ValueError, match=r"unknown option\(s\) 'windw' for mixer 'falcon-3a'; accepted: "):
        LanguageModel(config("falcon-3a", mixer_options={"windw": 2}))


def test_bad_inputs():
    lm = model()
    with pytest.raises(ValueError, match=r"input_ids must be an integer tensor of shape \[B, L\]"):
        lm(torch.zeros(B, L))
    with pytest.raises(ValueError, match=r"token_ids must be an integer tensor of shape \[B\]"):
        lm.step(tokens(), lm.init_cache(B))
    with pytest.raises(ValueError, match="cache must be the list of 2 layer caches"):
        lm.step(tokens()[:, 0], [])
