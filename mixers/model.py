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

Digit positions (``LMConfig.abacus``, the Abacus embeddings of McLeish et al., 2024): for arithmetic, a second
embedding indexed by each digit's significance is added to the token embedding. A run of digit tokens (ids in
``digit_ids``) that follows the token ``answer_marker`` counts from its left end (an answer written least
significant digit first: 1, 2, ...), any other run from its right end (an operand written most significant
digit first: its last digit is 1), and a token that is no digit gets index 0, whose vector is zero (and
stays so). Digits of one significance thus share a vector wherever they stand, and in training every row's
indices are shifted by a random offset in ``0..abacus`` so that indices past the trained widths are trained
too; outside training they are shifted by the fixed ``abacus_eval_offset`` (0 by default). An operand's
indices depend on where its run ends, so they need the whole prompt: such a model has no ``step``
(``can_step`` is False) and generation re-runs the prefix.

Isolated samples (``LMConfig.sample_end``, the token that ends a sample): a row that packs several samples
is read as that many sequences. Attention sees only the tokens of its own sample (a block-diagonal causal
mask; mixers that support it say so with ``masks_samples``), the Falcon mixers restart their fast weights
and convolutions at every sample (``resets_at_samples``: the samples go to the rule as packed sequences),
any other mixer mixes each sample laid on a row of its own (``samples_apart``), and with digit positions
every sample draws its own offset in training. Without it, a sample sees the samples packed before it in
its row, and a row shares one offset.

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

from mixers.layers import RMSNorm, SwiGLU
from mixers.registry import MIXERS, build_mixer, masks_samples, resets_at_samples


@dataclass
class LMConfig:
    """Size and mixer of a ``LanguageModel``.

    ffn_hidden: SwiGLU hidden width; None -> ``8/3·d_model`` rounded up to a multiple of ``ffn_multiple_of``
        (LLaMA; 2048 at d_model = 768); 0 -> blocks without an MLP (mixer only, as in Mamba's own models).
    mup: μP-style width scaling (see the module docstring); mup_base_width: the width where it is neutral.
    init_std: base init std of projections and the embedding.
    abacus: None (no digit positions) or the largest random offset of the digit positions in training (see
        the module docstring), with abacus_size indices (0 for non-digits) and the task's digit_ids (first,
        last) and answer_marker; abacus_eval_offset: the fixed offset of the indices outside training.
    sample_end: None, or the token that ends a sample: attention then stays inside each sample of a packed
        row, and digit-position offsets are drawn per sample (module docstring).
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
    abacus: int | None = None
    abacus_size: int = 0
    digit_ids: tuple[int, int] | None = None
    answer_marker: int | None = None
    abacus_eval_offset: int = 0
    sample_end: int | None = None

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
        if self.abacus is not None:
            if isinstance(self.abacus, bool) or not isinstance(self.abacus, int) or self.abacus < 0:
                raise ValueError(f"LMConfig.abacus must be None or an integer >= 0 (the largest offset), "
                                 f"got {self.abacus!r}")
            if self.digit_ids is None or self.answer_marker is None:
                raise ValueError("LMConfig.abacus needs digit_ids (first, last) and answer_marker")
            self.digit_ids = (int(self.digit_ids[0]), int(self.digit_ids[1]))
            if self.abacus_size < self.abacus + 2:
                raise ValueError(f"LMConfig.abacus_size={self.abacus_size} leaves no index past the largest "
                                 f"offset {self.abacus}; it must be at least abacus + 2")
        offset = self.abacus_eval_offset
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"LMConfig.abacus_eval_offset must be an integer >= 0, got {offset!r}")
        if offset and self.abacus is None:
            raise ValueError("LMConfig.abacus_eval_offset shifts digit positions: it needs abacus")
        if self.sample_end is not None:
            if isinstance(self.sample_end, bool) or not isinstance(self.sample_end, int):
                raise ValueError(f"LMConfig.sample_end must be None or a token id, got {self.sample_end!r}")

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


def digit_significance(input_ids: Tensor, digit_ids: tuple[int, int], answer_marker: int) -> Tensor:
    """``[B, L]`` indices: 0 for a token outside ``digit_ids`` (first, last); for a digit, its place in its
    run of digits, counted from the left (1, 2, ...) when the run follows ``answer_marker``, else from the
    right (the run's last digit is 1). Rows may pack several samples."""
    first, last = digit_ids
    digit = (input_ids >= first) & (input_ids <= last)
    length = input_ids.shape[1]
    pos = torch.arange(length, device=input_ids.device).expand_as(input_ids)
    before = torch.where(digit, -1, pos).cummax(dim=1).values  # the last non-digit at or before t
    after = torch.where(digit, length, pos).flip(1).cummin(dim=1).values.flip(1)  # the first at or after t
    marker = input_ids.gather(1, before.clamp(min=0))
    answer = (before >= 0) & (marker == answer_marker)
    return torch.where(digit, torch.where(answer, pos - before, after - pos), 0)


def sample_index(input_ids: Tensor, sample_end: int) -> Tensor:
    """``[B, L]``: which sample of its row each token belongs to (0, 1, ...); the token ``sample_end`` closes
    its sample, and the next token opens the next one."""
    end = (input_ids == sample_end).long()
    return end.cumsum(1) - end


def samples_apart(mix: nn.Module, x: Tensor, samples: Tensor) -> Tensor:
    """``mix`` over each sample of the packed rows ``x [B, L, d]`` alone, as if each began a sequence: the
    samples (``sample_index``) laid one to a row, padded at their ends (which a causal mixer's outputs cannot
    see), mixed, and put back in their rows."""
    first = torch.ones_like(samples, dtype=torch.bool)
    first[:, 1:] = samples[:, 1:] != samples[:, :-1]
    first = first.flatten()
    which = first.cumsum(0) - 1  # the sample of every token, counted over the whole batch
    starts = first.nonzero().flatten()
    at = torch.arange(first.numel(), device=x.device) - starts[which]  # its place in its sample
    rows = x.new_zeros(starts.numel(), int(at.max()) + 1, x.shape[-1])
    rows[which, at] = x.flatten(0, 1)
    return mix(rows)[which, at].unflatten(0, samples.shape)


def sample_mask(samples: Tensor) -> Tensor:
    """``[B, 1, L, L]`` boolean attention mask (True: attend) from ``sample_index``: causal, and within one
    sample."""
    length = samples.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=samples.device).tril()
    return ((samples[:, :, None] == samples[:, None, :]) & causal)[:, None]


class Block(nn.Module):
    """Pre-norm residual block: ``x + mixer(norm(x))`` then ``x + mlp(norm(x))``."""

    def __init__(self, cfg: LMConfig) -> None:
        super().__init__()
        self.mixer_norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.mixer = build_mixer(cfg.mixer, cfg.d_model, cfg.n_heads, **cfg.mixer_options)
        hidden = cfg.mlp_hidden
        self.mlp_norm = RMSNorm(cfg.d_model, cfg.norm_eps) if hidden else None
        self.mlp = SwiGLU(cfg.d_model, hidden) if hidden else None

    def forward(self, x: Tensor, mask: Tensor | None = None, samples: Tensor | None = None) -> Tensor:
        """Isolated samples: ``mask``, the ``[B, 1, L, L]`` attention mask of ``sample_mask`` for a mixer that
        masks; ``samples``, the ``[B, L]`` ``sample_index``, for any other (a mixer that restarts at each sample
        takes it, any other mixes each sample on a row of its own)."""
        h = self.mixer_norm(x)
        if mask is not None:
            h = self.mixer(h, mask=mask)
        elif samples is not None and getattr(self.mixer, "resets_at_samples", False):
            h = self.mixer(h, samples=samples)
        elif samples is not None:
            h = samples_apart(self.mixer, h, samples)
        else:
            h = self.mixer(h)
        x = x + h
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
        self.digit_embed = (None if cfg.abacus is None
                            else nn.Embedding(cfg.abacus_size, cfg.d_model, padding_idx=0))
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.n_layers))
        self.norm = RMSNorm(cfg.d_model, cfg.norm_eps)
        self.lm_head = None if cfg.tie_embeddings else nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)
        self.logit_scale = 1.0 / cfg.width_multiplier
        self.reset_parameters()

    @torch.no_grad()
    def reset_parameters(self) -> None:
        """Initialise the embedding and every projection (see the module docstring); mixers keep their
        own initialisation of decays, offsets, norms and conv filters."""
        cfg = self.cfg
        nn.init.normal_(self.embed.weight, std=cfg.init_std)
        if self.digit_embed is not None:
            nn.init.normal_(self.digit_embed.weight, std=cfg.init_std)
            self.digit_embed.weight[0].zero_()
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
        """Whether ``step`` can generate token by token: not with digit positions, which need the prompt, nor
        with isolated samples, whose mask the cache does not keep."""
        return self.digit_embed is None and self.cfg.sample_end is None

    def digit_positions(self, input_ids: Tensor, samples: Tensor | None = None) -> Tensor:
        """The digit-position index of every token ``[B, L]`` (module docstring), with the random offset of
        each row in training (of each sample, given ``samples``, the ``sample_index`` of isolated samples) and
        ``abacus_eval_offset`` outside it. Outside training a run longer than the table is an error; in
        training no check runs (it would sync every step): the table's size must cover the widest run plus
        the offset, as `lab.train.module.lm_config` sizes it, and an index past it is clamped to the last."""
        cfg = self.cfg
        index = digit_significance(input_ids, cfg.digit_ids, cfg.answer_marker)
        if self.training and cfg.abacus:
            rows = input_ids.shape[0]
            draws = 1 if samples is None else input_ids.shape[1]
            offset = torch.randint(0, cfg.abacus + 1, (rows, draws), device=input_ids.device)
            if samples is not None:
                offset = offset.gather(1, samples)
            index = torch.where(index > 0, index + offset, index)
            return index.clamp(max=cfg.abacus_size - 1)
        if cfg.abacus_eval_offset:
            index = torch.where(index > 0, index + cfg.abacus_eval_offset, index)
        if not torch.compiler.is_compiling() and index.numel() and int(index.max()) >= cfg.abacus_size:
            at = f" at offset {cfg.abacus_eval_offset}" if cfg.abacus_eval_offset else ""
            raise ValueError(f"a run of {int(index.max()) - cfg.abacus_eval_offset} digits{at} is longer than the "
                             f"digit positions cover ({cfg.abacus_size - 1})")
        return index.clamp(max=cfg.abacus_size - 1)

    def forward(self, input_ids: Tensor) -> Tensor:
        """Logits ``[B, L, vocab_size]`` for every position (position t sees tokens ≤ t)."""
        self._check_ids(input_ids, 2, "input_ids")
        h = self.embed(input_ids)
        samples = None if self.cfg.sample_end is None else sample_index(input_ids, self.cfg.sample_end)
        if self.digit_embed is not None:
            h = h + self.digit_embed(self.digit_positions(input_ids, samples))
        mask, restarts = None, None
        if samples is not None and masks_samples(self.cfg.mixer):
            mask = sample_mask(samples)
        elif samples is not None:
            restarts = samples
        for block in self.blocks:
            h = block(h, mask, restarts)
        return self._logits(h)

    def init_cache(self, batch: int, device: torch.device | str | None = None,
                   dtype: torch.dtype | None = None) -> list[Any]:
        """A fresh generation cache (one entry per layer); device and dtype default to the parameters'."""
        if self.digit_embed is not None:
            raise ValueError("a model with digit positions (abacus) cannot generate token by token: an "
                             "operand's positions need the whole prompt; re-run forward on the prefix")
        if not self.can_step:
            raise ValueError("a model with isolated samples (sample_end) cannot generate token by token: the "
                             "cache does not keep the samples apart; re-run forward on the prefix")
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
