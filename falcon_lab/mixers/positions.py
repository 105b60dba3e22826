"""What a task may add to the generic language model's input: digit positions and isolated samples.

``LMConfig.positions`` (a ``PositionsConfig``, None for a plain LM) makes ``LanguageModel`` take a
``Positions`` component: before the blocks it adds its embedding to the tokens' and hands every block the
way to mix (``Positions.forward``); the model itself knows neither feature.

Digit positions (``abacus``, the Abacus embeddings of McLeish et al., 2024): for arithmetic, a second
embedding indexed by each digit's significance is added to the token embedding. A run of digit tokens (ids in
``digit_ids``) that follows the token ``answer_marker`` counts from its left end (an answer written least
significant digit first: 1, 2, ...), any other run from its right end (an operand written most significant
digit first: its last digit is 1), and a token that is no digit gets index 0, whose vector is zero (and
stays so). Digits of one significance thus share a vector wherever they stand, and in training every row's
indices are shifted by a random offset in ``0..abacus`` so that indices past the trained widths are trained
too; outside training they are shifted by the fixed ``abacus_eval_offset`` (0 by default). The index's
vector is learned per index (``abacus_embed="learned"``) or a learned linear map of fixed sines and cosines of
the index (``"sinusoidal"``, ``SINE_PERIODS``): there index k + 1 is a fixed rotation of index k, so a linear map of
the features is one map for every index, trained or not (whether a model reads the untrained ones by it is measured
in records/addition/cpu_sines/: at toy size it did not). An operand's
indices depend on where its run ends, so they need the whole prompt: such a model has no ``step``
(``can_step`` is False) and generation re-runs the prefix.

Isolated samples (``sample_end``, the token that ends a sample): a row that packs several samples is read as
that many sequences. Attention sees only the tokens of its own sample (a block-diagonal causal mask; mixers
that support it say so with ``masks_samples``), the recurrent mixers restart their state and convolutions at
every sample (``resets_at_samples``: the samples go to the Falcon rules' and DeltaNet's kernels as packed
sequences, and to the scans of RetNet, Mamba-2 and Gated DeltaNet one to a row, the projections on the packed
rows), any other mixer mixes each sample laid on a row of its own (``samples_apart``), and with digit positions every
sample draws its own offset in training. Without it, a sample sees the samples packed before it in its row,
and a row shares one offset.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from falcon_lab.mixers.layers import SampleRows
from falcon_lab.mixers.registry import masks_samples

# How a block mixes its normalised input: ``mix(mixer, h)``.
Mix = Callable[[nn.Module, Tensor], Tensor]

# Periods of the sinusoidal digit positions, in indices: 2, 2·√2, 4, ... (16 of them, to about 362): the
# shortest resolve neighbours, the longest keep indices far past any trained width apart.
SINE_PERIODS = tuple(2.0 * 2.0 ** (i / 2) for i in range(16))
ABACUS_EMBEDS = ("learned", "sinusoidal")


@dataclass
class PositionsConfig:
    """The input features of a task (module docstring).

    abacus: None (no digit positions) or the largest random offset of the digit positions in training, with
        abacus_size indices (0 for non-digits) and the task's digit_ids (first, last) and answer_marker;
        abacus_eval_offset: the fixed offset of the indices outside training; abacus_ahead: the answer's tokens
        carry the index of the digit they predict (``digit_significance``); abacus_embed: "learned" (a
        vector per index) or "sinusoidal" (a learned linear map of the index's fixed sines and cosines);
        abacus_shift_frac: the fraction of rows (samples) that take the random offset in training, the rest
        keeping offset 0; abacus_start: the training forward passes before any row takes it (exact positions
        first, counted in the module's ``seen`` buffer, which checkpoints keep).
    sample_end: None, or the token that ends a sample: attention then stays inside each sample of a packed
        row, and digit-position offsets are drawn per sample.
    """

    abacus: int | None = None
    abacus_size: int = 0
    digit_ids: tuple[int, int] | None = None
    answer_marker: int | None = None
    abacus_eval_offset: int = 0
    abacus_ahead: bool = False
    abacus_embed: str = "learned"
    abacus_shift_frac: float = 1.0
    abacus_start: int = 0
    sample_end: int | None = None

    def __post_init__(self) -> None:
        if self.abacus is not None:
            if isinstance(self.abacus, bool) or not isinstance(self.abacus, int) or self.abacus < 0:
                raise ValueError(f"PositionsConfig.abacus must be None or an integer >= 0 (the largest offset), "
                                 f"got {self.abacus!r}")
            if self.digit_ids is None or self.answer_marker is None:
                raise ValueError("PositionsConfig.abacus needs digit_ids (first, last) and answer_marker")
            self.digit_ids = (int(self.digit_ids[0]), int(self.digit_ids[1]))
            if self.abacus_size < self.abacus + 2:
                raise ValueError(f"PositionsConfig.abacus_size={self.abacus_size} leaves no index past the largest "
                                 f"offset {self.abacus}; it must be at least abacus + 2")
        offset = self.abacus_eval_offset
        if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
            raise ValueError(f"PositionsConfig.abacus_eval_offset must be an integer >= 0, got {offset!r}")
        if offset and self.abacus is None:
            raise ValueError("PositionsConfig.abacus_eval_offset shifts digit positions: it needs abacus")
        if self.abacus_embed not in ABACUS_EMBEDS:
            raise ValueError(f"PositionsConfig.abacus_embed must be one of {ABACUS_EMBEDS}, got {self.abacus_embed!r}")
        if self.abacus_ahead and self.abacus is None:
            raise ValueError("PositionsConfig.abacus_ahead moves digit positions: it needs abacus")
        if isinstance(self.abacus_start, bool) or not isinstance(self.abacus_start, int) or self.abacus_start < 0:
            raise ValueError(f"PositionsConfig.abacus_start must be an integer >= 0, got {self.abacus_start!r}")
        if not 0.0 <= self.abacus_shift_frac <= 1.0:
            raise ValueError(f"PositionsConfig.abacus_shift_frac must lie in [0, 1], got {self.abacus_shift_frac!r}")
        if self.sample_end is not None:
            if isinstance(self.sample_end, bool) or not isinstance(self.sample_end, int):
                raise ValueError(f"PositionsConfig.sample_end must be None or a token id, got {self.sample_end!r}")


def digit_significance(input_ids: Tensor, digit_ids: tuple[int, int], answer_marker: int,
                       ahead: bool = False) -> Tensor:
    """``[B, L]`` indices: 0 for a token outside ``digit_ids`` (first, last); for a digit, its place in its
    run of digits, counted from the left (1, 2, ...) when the run follows ``answer_marker``, else from the
    right (the run's last digit is 1). Rows may pack several samples.

    ``ahead``: the answer's tokens carry the index of the digit they predict instead of their own: the marker
    1, the answer's k-th digit k + 1. The token that predicts the digit of significance k then holds the index of
    the operand digits it adds, so a model can find them by matching one index to itself rather than by a
    successor it must learn for every index."""
    first, last = digit_ids
    digit = (input_ids >= first) & (input_ids <= last)
    length = input_ids.shape[1]
    pos = torch.arange(length, device=input_ids.device).expand_as(input_ids)
    before = torch.where(digit, -1, pos).cummax(dim=1).values  # the last non-digit at or before t
    after = torch.where(digit, length, pos).flip(1).cummin(dim=1).values.flip(1)  # the first at or after t
    marker = input_ids.gather(1, before.clamp(min=0))
    answer = (before >= 0) & (marker == answer_marker)
    if ahead:
        index = torch.where(digit, torch.where(answer, pos - before + 1, after - pos), 0)
        return torch.where(input_ids == answer_marker, 1, index)
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
    rows = SampleRows(samples)
    return rows.back(mix(rows.apart(x)))


def sample_mask(samples: Tensor) -> Tensor:
    """``[B, 1, L, L]`` boolean attention mask (True: attend) from ``sample_index``: causal, and within one
    sample."""
    length = samples.shape[1]
    causal = torch.ones(length, length, dtype=torch.bool, device=samples.device).tril()
    return ((samples[:, :, None] == samples[:, None, :]) & causal)[:, None]


def isolated(mixer_name: str, samples: Tensor) -> Mix:
    """How every block mixes the packed samples ``samples`` (``sample_index``) apart: a masking mixer with the
    ``sample_mask``, one that restarts at each sample with ``samples``, any other on rows of their own."""
    if masks_samples(mixer_name):
        mask = sample_mask(samples)
        return lambda mixer, h: mixer(h, mask=mask)

    def mix(mixer: nn.Module, h: Tensor) -> Tensor:
        if getattr(mixer, "resets_at_samples", False):
            return mixer(h, samples=samples)
        return samples_apart(mixer, h, samples)

    return mix


class Positions(nn.Module):
    """A task's input features for ``LanguageModel`` (module docstring): the digit-position embedding
    (``digit_embed`` per index, or ``digit_sines`` mapped by ``digit_proj``, when ``abacus`` is set) and the
    isolation of packed samples (when ``sample_end`` is)."""

    def __init__(self, cfg: PositionsConfig, d_model: int, mixer: str) -> None:
        super().__init__()
        self.cfg, self.mixer = cfg, mixer
        learned = cfg.abacus is not None and cfg.abacus_embed == "learned"
        sines = cfg.abacus is not None and cfg.abacus_embed == "sinusoidal"
        self.digit_embed = nn.Embedding(cfg.abacus_size, d_model, padding_idx=0) if learned else None
        self.digit_proj = nn.Linear(2 * len(SINE_PERIODS), d_model, bias=False) if sines else None
        if sines:
            self.register_buffer("frequencies", 2 * torch.pi / torch.tensor(SINE_PERIODS),
                                 persistent=False)
        if cfg.abacus and cfg.abacus_start:  # training forward passes so far (the offset's start)
            self.register_buffer("seen", torch.zeros((), dtype=torch.long))

    @torch.no_grad()
    def reset_parameters(self, init_std: float) -> None:
        """The digit positions as the token embedding (each index's vector of std ``init_std``), and index 0
        (no digit) at zero."""
        if self.digit_embed is not None:
            nn.init.normal_(self.digit_embed.weight, std=init_std)
            self.digit_embed.weight[0].zero_()
        if self.digit_proj is not None:  # features of norm 1 (digit_sines): each index's vector as an embedding's
            nn.init.normal_(self.digit_proj.weight, std=init_std)

    def digit_sines(self, index: Tensor) -> Tensor:
        """``[..., 2F]`` fixed features of digit-position indices: ``sin`` and ``cos`` of ``2π k / p`` for each
        period ``p`` of ``SINE_PERIODS``, scaled to norm 1, and zero for index 0 (no digit)."""
        angles = index.to(self.frequencies.dtype)[..., None] * self.frequencies
        scale = (index > 0)[..., None].to(angles.dtype) / len(SINE_PERIODS) ** 0.5
        return (torch.cat([angles.sin(), angles.cos()], dim=-1) * scale).to(self.digit_proj.weight.dtype)

    def why_no_step(self) -> str | None:
        """Why a model with these features cannot generate token by token (None: it can)."""
        if self.cfg.abacus is not None:
            return ("a model with digit positions (abacus) cannot generate token by token: an operand's "
                    "positions need the whole prompt; re-run forward on the prefix")
        if self.cfg.sample_end is not None:
            return ("a model with isolated samples (sample_end) cannot generate token by token: the cache does "
                    "not keep the samples apart; re-run forward on the prefix")
        return None

    def digit_positions(self, input_ids: Tensor, samples: Tensor | None = None) -> Tensor:
        """The digit-position index of every token ``[B, L]`` (module docstring), with the random offset of
        each row in training (of each sample, given ``samples``, the ``sample_index`` of isolated samples) and
        ``abacus_eval_offset`` outside it. Outside training a run longer than the table is an error; in
        training no check runs (it would sync every step): the table's size must cover the widest run plus
        the offset, as `falcon_lab.train.module.lm_config` sizes it, and an index past it is clamped to the last."""
        cfg = self.cfg
        index = digit_significance(input_ids, cfg.digit_ids, cfg.answer_marker, cfg.abacus_ahead)
        if self.training and cfg.abacus:
            rows = input_ids.shape[0]
            draws = 1 if samples is None else input_ids.shape[1]
            offset = torch.randint(0, cfg.abacus + 1, (rows, draws), device=input_ids.device)
            if cfg.abacus_shift_frac < 1.0:  # the other rows keep the exact significance
                shifted = torch.rand(rows, draws, device=input_ids.device) < cfg.abacus_shift_frac
                offset = torch.where(shifted, offset, 0)
            if cfg.abacus_start:  # exact positions for the first abacus_start passes
                self.seen += 1
                offset = torch.where(self.seen > cfg.abacus_start, offset, 0)
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

    def forward(self, input_ids: Tensor, h: Tensor) -> tuple[Tensor, Mix | None]:
        """The token embeddings ``h`` with the digit positions added, and how every block mixes (None: as
        usual)."""
        samples = None if self.cfg.sample_end is None else sample_index(input_ids, self.cfg.sample_end)
        if self.digit_embed is not None:
            h = h + self.digit_embed(self.digit_positions(input_ids, samples))
        elif self.digit_proj is not None:
            h = h + self.digit_proj(self.digit_sines(self.digit_positions(input_ids, samples))).to(h.dtype)
        return h, None if samples is None else isolated(self.mixer, samples)


def positions_of_older_checkpoints(module: nn.Module, state_dict: dict[str, Any], prefix: str, *args: Any) -> None:
    """A load_state_dict pre-hook of the language model: weights saved before the positions were a component of
    their own held ``digit_embed.weight``; they load as ``positions.digit_embed.weight``."""
    old = f"{prefix}digit_embed.weight"
    if old in state_dict:
        state_dict[f"{prefix}positions.digit_embed.weight"] = state_dict.pop(old)
