"""The six Falcon rules (falcon-1/2/3, falcon-1a/2a/3a) as one op: ``fast_weight_rule`` runs any rule on any
backend through the rule's spec (``rules``: each rule declared once, its forms imported from
``falcon_lab/kernels/regression``, ``falcon_lab/kernels/inner_product`` and ``falcon_lab/kernels/window``)."""

from falcon_lab.kernels.common.config import ALIGNMENTS, BACKENDS, RULES, TIMINGS, RuleConfig
from falcon_lab.kernels.common.spec import RuleSpec, register_rule, rule_spec, rule_specs, unregister_rule
from falcon_lab.kernels.falcon import rules
from falcon_lab.kernels.falcon.rules import decayed_attention
from falcon_lab.kernels.common.state import FastWeightState, fresh_state
from falcon_lab.kernels.falcon.api import fast_weight_rule, fast_weight_step

__all__ = ["ALIGNMENTS", "BACKENDS", "RULES", "TIMINGS", "FastWeightState", "RuleConfig", "RuleSpec",
           "decayed_attention", "fast_weight_rule", "fast_weight_step", "fresh_state", "register_rule", "rule_spec",
           "rule_specs", "rules", "unregister_rule"]
