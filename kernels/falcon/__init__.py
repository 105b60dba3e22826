"""The six Falcon rules (falcon-1/2/3, falcon-1a/2a/3a) in exact reference forms."""

from kernels.falcon.api import BACKENDS, fast_weight_rule, fast_weight_step
from kernels.common.config import ALIGNMENTS, RULES, TIMINGS, RuleConfig
from kernels.common.state import FastWeightState, fresh_state

__all__ = ["ALIGNMENTS", "BACKENDS", "RULES", "TIMINGS", "FastWeightState", "RuleConfig",
           "fast_weight_rule", "fast_weight_step", "fresh_state"]
