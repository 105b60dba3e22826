"""The gated delta rule (DeltaNet, Gated DeltaNet) in a recurrent oracle and a chunk-parallel WY form."""

from falcon_lab.kernels.delta.api import DELTA_BACKENDS, gated_delta_rule

__all__ = ["DELTA_BACKENDS", "gated_delta_rule"]
