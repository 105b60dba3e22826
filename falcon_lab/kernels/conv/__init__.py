"""The short causal depthwise convolution with SiLU that the recurrent mixers put on q, k, v (Mamba-2 on x, B, C),
fused in Triton with the packed samples' resets (``triton_short_conv``). Its exact PyTorch twin is
``falcon_lab.mixers.layers.ShortConv``'s own forward, which CPUs run."""

from falcon_lab.kernels.conv.triton_short_conv import short_conv

__all__ = ["short_conv"]
