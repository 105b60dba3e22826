"""The ops layer: fast-weight rules as functional ops (like ``fla.ops``).

Mixers build on these; this package imports nothing from the rest of the project.
"""

from falcon_lab.kernels.delta import gated_delta_rule
from falcon_lab.kernels.falcon import (
    ALIGNMENTS,
    BACKENDS,
    RULES,
    TIMINGS,
    FastWeightState,
    RuleConfig,
    RuleSpec,
    decayed_attention,
    fast_weight_rule,
    fast_weight_step,
    register_rule,
    rule_spec,
    rule_specs,
    unregister_rule,
)
from falcon_lab.kernels.linear_attention import linear_attention
from falcon_lab.kernels.regression.gated_delta import gated_delta_triton
from falcon_lab.kernels.regression.gated_delta import refusal as gated_delta_refusal

__all__ = [
    "ALIGNMENTS",
    "BACKENDS",
    "RULES",
    "TIMINGS",
    "FastWeightState",
    "RuleConfig",
    "RuleSpec",
    "decayed_attention",
    "fast_weight_rule",
    "fast_weight_step",
    "gated_delta_refusal",
    "gated_delta_rule",
    "gated_delta_triton",
    "linear_attention",
    "register_rule",
    "rule_spec",
    "rule_specs",
    "unregister_rule",
]
