"""The rule configuration shared by every backend of the Falcon rules, and the names every op accepts."""

from __future__ import annotations

from dataclasses import dataclass

# the registered rules, and those with fused forms (live views of the registry: falcon_lab.kernels.common.spec)
from falcon_lab.kernels.common.spec import FUSED_RULES, RULES, RuleSpec, rule_spec

ALIGNMENTS = ("shifted", "same_time")
TIMINGS = ("raw", "rbw")
BACKENDS = ("recurrent", "masked", "chunk", "triton")
# backend="triton": the chunk sizes every fused form takes (falcon-2 and falcon-2a work in blocks of 16 tokens
# inside a chunk) and the widest head they take
CHUNK_SIZES = (16, 32, 64)
FUSED_MAX_HEAD_DIM = 256
# falcon-3's fused chunk holds at most 64 window slots (its block-strict system is inverted in registers), so at
# least one token's window padded to a power of two: windows up to 64
FUSED_MAX_WINDOW = 64
# falcon-2a's fused kernels factor its per-channel carry around the midpoint of each block of 16 tokens: the
# factors stay below e^{8 |log ε_γ|} only for floors this large
FUSED_MIN_DECAY_FLOOR_PER_CHANNEL = 1e-3


@dataclass(frozen=True)
class RuleConfig:
    """Everything that fixes the recurrence of one rule, apart from the tensors. The op checks the options
    (``falcon_lab.kernels.common.checks.check_rule_options``) before it builds one.

    ``normalize=False`` is the ctxη reading: the op was given the step size η itself (``eta=``) in place of the
    gain β, and no energy normalisation is applied (the carry is still ``γ = 1 − min(η λ, 1 − ε_γ)``).

    The rule's traits (``regression``, ``per_channel``, ``windowed``) are its spec's (``spec``).

    ``gated_delta=True`` (falcon-1's fused kernels only, set by ``falcon_lab.kernels.regression.gated_delta``)
    runs the gated delta rule ``S_t = γ_t (I − η_t x_t x_tᵀ) S_{t−1} + η_t x_t y_tᵀ``: η_t and log γ_t are given
    in place of β and λ, and the residual reads the state after its decay (falcon-1's reads it before).
    """

    rule: str
    window: int = 4
    eps: float = 1e-6
    decay_floor: float = 1e-3
    scale_coupled_ridge: bool = False
    alignment: str = "shifted"
    timing: str = "raw"
    normalize: bool = True
    gated_delta: bool = False

    @property
    def spec(self) -> RuleSpec:
        """The registered spec of ``rule``."""
        return rule_spec(self.rule)

    @property
    def regression(self) -> bool:
        """Rules 1/2/3 write the residual ``y − Sᵀx``; the A rules write the target ``y`` itself."""
        return self.spec.regression

    @property
    def per_channel(self) -> bool:
        """Rules 2/2a carry one gain (and one carry) per value channel."""
        return self.spec.per_channel

    @property
    def windowed(self) -> bool:
        """Rules 3/3a take one step on the mean loss of a sliding window of pairs."""
        return self.spec.windowed

    @property
    def span(self) -> int:
        """How many pairs one update reads: the window B for 3/3a, else 1."""
        return self.window if self.windowed else 1

    @property
    def shifted(self) -> bool:
        return self.alignment == "shifted"
