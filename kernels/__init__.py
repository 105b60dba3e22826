"""The ops layer: fast-weight rules as functional ops (like ``fla.ops``).

Mixers build on these; this package imports nothing from the rest of the project.
"""

from kernels.delta import gated_delta_rule
from kernels.falcon import (
    ALIGNMENTS,
    BACKENDS,
    RULES,
    TIMINGS,
    FastWeightState,
    RuleConfig,
    fast_weight_rule,
    fast_weight_step,
)
from kernels.linear_attention import linear_attention

__all__ = [
    "ALIGNMENTS",
    "BACKENDS",
    "RULES",
    "TIMINGS",
    "FastWeightState",
    "RuleConfig",
    "fast_weight_rule",
    "fast_weight_step",
    "gated_delta_rule",
    "linear_attention",
]
