"""The LLaMA-style language model around any registered mixer.

``embedding -> n_layers × [x + mixer(RMSNorm(x)); x + SwiGLU(RMSNorm(x))] -> RMSNorm -> tied unembedding``,
no bias anywhere, no dropout.

Initialisation and μP-style width scaling (``LMConfig.mup``), with width multiplier
``m = d_model / mup_base_width``:

====================  ===================================  ==================================
parameter             init std (mup=False / mup=True)      lr multiplier (mup=False / True)
====================  ===================================  ==================================
embedding, lm_head    init_std / init_std                  1 / 1
hidden ``nn.Linear``  init_std / init_std / sqrt(m)        1 / 1/m
norms, gains, conv,   the mixer's own init                 1 / 1
per-head scalars
====================  ===================================  ==================================

Projections writing into the residual stream are further scaled by ``1/sqrt(2·n_layers)`` at init. With
``mup=True`` the logits are multiplied by ``1/m`` (the μP output multiplier: the readout's lr stays
constant and its effect shrinks with width instead). Every hidden fan-in grows in proportion to d_model, so
``init_std/sqrt(m)`` is the μP variance ∝ 1/fan_in, anchored at the base width. Heads are added at fixed
head width when scaling, so attention keeps its ``1/sqrt(head_dim)``. At ``d_model = mup_base_width``
both settings give the same model.

A task's input features (digit positions, isolated samples: ``LMConfig.positions``) are one optional component,
``falcon_lab.mixers.positions.Positions``: it adds its embedding to the tokens' and tells each block how to mix.

Weight decay: every parameter with two or more axes (projections, the embedding, conv filters) decays;
vectors and scalars (norm gains, per-head decay/step offsets, skip gains) never do.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from falcon_lab.mixers.layers import RMSNorm, SwiGLU
from falcon_lab.mixers.positions import Mix, Positions, PositionsConfig, positions_of_older_checkpoints
from falcon_lab.mixers.registry import MIXERS, build_mixer


@dataclass
class LMConfig:
    """Size and mixer of a ``LanguageModel``.

    ffn_hidden: SwiGLU hidden width; None -> ``8/3·d_model`` rounded up to a multiple of ``ffn_multiple_of``
        (LLaMA; 2048 at d_model = 768); 0 -> blocks without an MLP (mixer only, as in Mamba's own models).
    mup: μP-style width scaling (see the module docstring); mup_base_width: the width where it is neutral.
    init_std: base init std of projections and the embedding.
    positions: None, or a task's input features (digit positions, isolated samples: ``falcon_lab.mixers.positions``).
    """

    vocab_size: int
    d_model: int
    n_layers: int
    n_heads: int
    mixer: str = "transformer"
    mixer_options: dict[str, Any] = field(default_factory=dict)
    ffn_hidden: int | None = None
    ffn_multiple_of: int = 64
    mup: bool = False
    mup_base_width: int = 256
    init_std: float = 0.02
    norm_eps: float = 1e-6
    tie_embeddings: bool = True
    positions: PositionsConfig | None = None

    def __post_init__(self) -> None:
        for name in ("vocab_size", "d_model", "n_layers", "n_heads", "ffn_multiple_of", "mup_base_width"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"LMConfig.{name} must be an integer >= 1, got {value!r}")
        if self.ffn_hidden is not None and (isinstance(self.ffn_hidden, bool) or not isinstance(self.ffn_hidden, int)
                                            or self.ffn_hidden < 0):
            raise ValueError(f"LMConfig.ffn_hidden must be None (8/3·d_model) or an integer >= 0 (0: no MLP), "
                             f"got {self.ffn_hidden!r}")
        if self.mixer not in MIXERS:
            raise ValueError(f"LMConfig.mixer={self.mixer!r} is not a registered mixer; accepted: "
                             f"{', '.join(MIXERS)}")
        if not isinstance(self.mixer_options, dict):
            raise ValueError(f"LMConfig.mixer_options must be a dict, got {type(self.mixer_options).__name__}")
        for name in ("init_std", "norm_eps"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(f"LMConfig.{name} must be a number > 0, got {value!r}")
        for name in ("mup", "tie_embeddings"):
            if not isinstance(getattr(self, name), bool):
                raise ValueError(f"LMConfig.{name} must be True or False, got {getattr(self, name)!r}")
        if isinstance(self.positions, dict):
            self.positions = PositionsConfig(**self.positions)

    @property
    def mlp_hidden(self) -> int:
        """The SwiGLU hidden width actually used (0: no MLP)."""
        if self.ffn_hidden is not None:
            return self.ffn_hidden
        m = self.ffn_multiple_of
        return m * math.ceil(8 * self.d_model / 3 / m)

    @property
    def width_multiplier(self) -> float:
        """μP's m = d_model / mup_base_width (1 without μP)."""
        return self.d_model / self.mup_base_width if self.mup else 1.0

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LMConfig:
        return cls(**data)


class Block(nn.Module):
    """Pre-norm residual block: ``x + mixer(norm(x))`` then ``x + mlp(norm(x))``."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.mixer_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mixer = build_mixer(cfg.mixer, cfg.d_model, cfg.n_heads, **cfg.mixer_options)
        hidden = cfg.mlp_hidden
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps) if hidden else None
        self.mlp = SwiGLU(cfg.d_model, hidden) if hidden else None

    def forward(self, x: Tensor, mix: Mix | None = None) -> Tensor:
        """``mix(mixer, h)``: how the mixer reads its input, when the model's positions say (isolated samples)."""
        h = self.mixer_norm(x)
        x = x + (self.mixer(h) if mix is None else mix(self.mixer, h))
        if self.mlp is not None:
            x = x + self.mlp(self.mlp_norm(x))
        return x

    def step(self, x_t: Tensor, cache: Any) -> tuple[Tensor, Any]:
        y, cache = self.mixer.step(self.mixer_norm(x_t), cache)
        x_t = x_t + y
        if self.mlp is not None:
            x_t = x_t + self.mlp(self.mlp_norm(x_t))
        return x_t, cache


class LanguageModel(nn.Module):
    """A causal language model: ``forward(input_ids [B, L]) -> logits [B, L, vocab_size]``."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.positions = None if cfg.positions is None else Positions(cfg.positions, cfg.d_model, cfg.mixer)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.logit_scale = 1.0 / cfg.width_multiplier
        self.reset_parameters()
        self._register_load_state_dict_pre_hook(positions_of_older_checkpoints, with_module=True)

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Initialise the embedding and every projection (see the module docstring); mixers keep their
        own initialisation of decays, offsets, norms and conv filters."""
        cfg = self.cfg
        nn.init.normal_(self.embed.weight, std=cfg.init_std)
        if self.positions is not None:
            self.positions.reset_parameters(cfg.init_std)
        if self.lm_head is not None:
            nn.init.normal_(self.lm_head.weight, std=cfg.init_std)
        depth = 1.0 / math.sqrt(2 * cfg.n_layers)
        for module in self.blocks.modules():
            if isinstance(module, nn.Linear):
                std = cfg.init_std / math.sqrt(cfg.width_multiplier)
                if getattr(module, "residual_out", False):
                    std *= depth
                nn.init.normal_(module.weight, std=std)

    def _check_ids(self, ids: Tensor, dims: int, what: str) -> None:
        if not isinstance(ids, Tensor) or ids.dim() != dims or ids.is_floating_point() or ids.is_complex():
            got = f"{tuple(ids.shape)} {ids.dtype}" if isinstance(ids, Tensor) else type(ids).__name__
            raise ValueError(f"{what} must be an integer tensor of shape {'[B, L]' if dims == 2 else '[B]'}, "
                             f"got {got}")

    def _logits(self, h: Tensor) -> Tensor:
        weight = self.embed.weight if self.lm_head is None else self.lm_head.weight
        return F.linear(self.norm(h), weight) * self.logit_scale

    @property
    def can_step(self) -> bool:
        """Whether ``step`` can generate token by token: not with positions that need the whole prompt (digit
        positions) or a mask the cache does not keep (isolated samples)."""
        return self.positions is None or self.positions.why_no_step() is None

    def forward(self, input_ids: Tensor) -> Tensor:
        """Logits ``[B, L, vocab_size]`` for every position (position t sees tokens ≤ t)."""
        self._check_ids(input_ids, 2, "input_ids")
        h, mix = self.embed(input_ids), None
        if self.positions is not None:
            h, mix = self.positions(input_ids, h)
        for block in self.blocks:
            h = block(h, mix)
        return self._logits(h)

    def init_cache(self, batch: int, device: torch.device | str | None = None,
                   dtype: torch.dtype | None = None) -> list[Any]:
        """A fresh generation cache (one entry per layer); device and dtype default to the parameters'."""
        if not self.can_step:
            raise ValueError(self.positions.why_no_step())
        p = self.embed.weight
        device = p.device if device is None else device
        dtype = p.dtype if dtype is None else dtype
        return [block.mixer.init_cache(batch, device, dtype) for block in self.blocks]

    def step(self, token_ids: Tensor, cache: list[Any]) -> tuple[Tensor, list[Any]]:
        """Advance every sequence by one token ``[B]``: returns logits ``[B, vocab_size]`` for the next
        token and the new cache. Stepping a sequence token by token equals ``forward`` on it."""
        self._check_ids(token_ids, 1, "token_ids")
        if not isinstance(cache, list) or len(cache) != len(self.blocks):
            raise ValueError(f"cache must be the list of {len(self.blocks)} layer caches from init_cache()")
        h = self.embed(token_ids)
        new_cache = []
        for block, layer_cache in zip(self.blocks, cache):
            h, layer_cache = block.step(h, layer_cache)
            new_cache.append(layer_cache)
        return self._logits(h), new_cache

    @torch.no_grad()
    def generate_greedy(self, prompt_ids: Tensor, max_new_tokens: int) -> Tensor:
        """Feed ``prompt_ids [B, P]`` through ``step`` and then emit ``max_new_tokens`` greedy tokens
        ``[B, max_new_tokens]``."""
        self._check_ids(prompt_ids, 2, "prompt_ids")
        if prompt_ids.shape[1] < 1:
            raise ValueError("prompt_ids must hold at least one token per sequence")
        if isinstance(max_new_tokens, bool) or not isinstance(max_new_tokens, int) or max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be an integer >= 1, got {max_new_tokens!r}")
        cache = self.init_cache(prompt_ids.shape[0])
        for t in range(prompt_ids.shape[1]):
            logits, cache = self.step(prompt_ids[:, t], cache)
        out = []
        for _ in range(max_new_tokens):
            token = logits.argmax(-1)
            out.append(token)
            if len(out) < max_new_tokens:
                logits, cache = self.step(token, cache)
        return torch.stack(out, dim=1)

    def num_parameters(self, exclude_embeddings: bool = False) -> int:
        """Number of distinct parameters (a tied embedding counts once)."""
        total = sum(p.numel() for p in self.parameters())
        if exclude_embeddings:
            total -= self.embed.weight.numel()
        return total

    def no_decay_parameter_names(self) -> list[str]:
        """Parameters that never take weight decay: every vector and scalar (norm gains, per-head
        offsets and decays, skip gains)."""
        return [name for name, p in self.named_parameters() if p.dim() < 2]

    def lr_multipliers(self) -> dict[str, float]:
        """Per-parameter learning-rate multipliers: ``1/m`` for hidden projections under μP, else 1."""
        hidden = {f"blocks.{n}.weight" for n, m in self.blocks.named_modules() if isinstance(m, nn.Linear)}
        inv_m = 1.0 / self.cfg.width_multiplier
        return {name: (inv_m if name in hidden else 1.0) for name, _ in self.named_parameters()}

    def parameter_groups(self, lr: float, weight_decay: float) -> list[dict[str, Any]]:
        """Optimizer parameter groups (for ``torch.optim.AdamW(groups)``) applying the lr multipliers and
        the weight-decay split. Each group also records ``lr_mult`` and the parameter ``names``."""
        no_decay = set(self.no_decay_parameter_names())
        mults = self.lr_multipliers()
        groups: dict[tuple[float, bool], dict[str, Any]] = {}
        for name, p in self.named_parameters():
            key = (mults[name], name not in no_decay)
            group = groups.setdefault(key, {"params": [], "names": [], "lr": lr * key[0], "lr_mult": key[0],
                                            "weight_decay": weight_decay if key[1] else 0.0})
            group["params"].append(p)
            group["names"].append(name)
        return list(groups.values())
