"""The six Falcon rules (falcon-1/2/3, falcon-1a/2a/3a) as one op: ``fast_weight_rule`` runs any rule on any
backend through one dispatch table; the forms live in ``kernels/regression``, ``kernels/inner_product`` and
``kernels/window``."""

from kernels.common.config import ALIGNMENTS, BACKENDS, RULES, TIMINGS, RuleConfig
from kernels.common.state import FastWeightState, fresh_state
from kernels.falcon.api import fast_weight_rule, fast_weight_step

__all__ = ["ALIGNMENTS", "BACKENDS", "RULES", "TIMINGS", "FastWeightState", "RuleConfig",
           "fast_weight_rule", "fast_weight_step", "fresh_state"]
