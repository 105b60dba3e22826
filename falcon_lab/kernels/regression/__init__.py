"""falcon-1 and falcon-2, the regression rules: they write the residual r = y − Sᵀx. The recurrent oracle
(``naive``), the masked and chunk forms on the WY core of ``falcon_lab.kernels.delta.wy`` (``masked``, ``chunk``) and the
fused Triton kernels (``fused`` and its ``triton_*`` modules)."""
