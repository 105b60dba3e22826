"""The gated delta rule (DeltaNet, Gated DeltaNet) in a recurrent oracle and a chunk-parallel WY form; DeltaNet
also on falcon-1's fused kernels (``FUSED_BACKENDS``)."""

from kernels.delta.api import DELTA_BACKENDS, FUSED_BACKENDS, gated_delta_rule

__all__ = ["DELTA_BACKENDS", "FUSED_BACKENDS", "gated_delta_rule"]
