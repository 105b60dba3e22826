"""falcon-3 and falcon-3a, the window rules: one step on the mean loss of the last B pairs. The recurrent
oracle (``naive``); falcon-3's masked and chunk forms (``masked``, ``chunk``) on the block-triangular window solve
(``solve``) with its Triton parts (``eigen`` and ``triton_eig4`` for μ_t, ``triton_tril_inverse``); falcon-3a's
fused form as one delayed decayed linear attention on the falcon-1a kernels and a band (``fused``)."""
