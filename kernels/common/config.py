"""The rule configuration shared by every backend of the Falcon rules."""

from __future__ import annotations

from dataclasses import dataclass

RULES = ("falcon-1", "falcon-2", "falcon-3", "falcon-1a", "falcon-2a", "falcon-3a")
ALIGNMENTS = ("shifted", "same_time")
TIMINGS = ("raw", "rbw")


@dataclass(frozen=True)
class RuleConfig:
    """Everything that fixes the recurrence of one rule, apart from the tensors.

    ``normalize=False`` is the ctxη reading: the tensor passed as ``beta`` is the step size η itself and no
    energy normalisation is applied (the carry is still ``γ = 1 − min(η λ, 1 − ε_γ)``).
    """

    rule: str
    window: int = 4
    eps: float = 1e-6
    decay_floor: float = 1e-3
    scale_coupled_ridge: bool = False
    alignment: str = "shifted"
    timing: str = "raw"
    normalize: bool = True

    def __post_init__(self) -> None:
        if self.rule not in RULES:
            raise ValueError(f"rule={self.rule!r} is not a Falcon rule; accepted: {', '.join(RULES)}")
        if self.alignment not in ALIGNMENTS:
            raise ValueError(f"alignment={self.alignment!r}; accepted: {', '.join(ALIGNMENTS)}")
        if self.timing not in TIMINGS:
            raise ValueError(f"timing={self.timing!r}; accepted: {', '.join(TIMINGS)}")
        if isinstance(self.window, bool) or not isinstance(self.window, int) or self.window < 1:
            raise ValueError(f"window must be an integer >= 1, got {self.window!r}")
        if not self.eps >= 0:
            raise ValueError(f"eps must be >= 0, got {self.eps!r}")
        if not 0 < self.decay_floor < 1:
            raise ValueError(f"decay_floor (ε_γ) must lie in (0, 1), got {self.decay_floor!r}")

    @property
    def regression(self) -> bool:
        """Rules 1/2/3 write the residual ``y − Sᵀx``; the A rules write the target ``y`` itself."""
        return not self.rule.endswith("a")

    @property
    def per_channel(self) -> bool:
        """Rules 2/2a carry one gain (and one carry) per value channel."""
        return self.rule in ("falcon-2", "falcon-2a")

    @property
    def windowed(self) -> bool:
        """Rules 3/3a take one step on the mean loss of a sliding window of pairs."""
        return self.rule in ("falcon-3", "falcon-3a")

    @property
    def span(self) -> int:
        """How many pairs one update reads: the window B for 3/3a, else 1."""
        return self.window if self.windowed else 1

    @property
    def shifted(self) -> bool:
        return self.alignment == "shifted"
