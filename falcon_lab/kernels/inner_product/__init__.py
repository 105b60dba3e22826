"""falcon-1a and falcon-2a, the inner-product rules: they write the target y itself, decayed linear attention
with a data-dependent step. The recurrent oracle (``naive``), the masked and chunk forms on the core of
``falcon_lab.kernels.linear_attention`` (``masked``, ``chunk``; with a window of pairs they run falcon-3a too) and the fused
Triton kernels (``fused`` and its ``triton_*`` modules)."""
