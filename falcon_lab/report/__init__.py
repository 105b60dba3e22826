"""`lab report all`: one REPORT.md of the committed records (Table 3 beside the paper, the alignment
ablation, the per-width curves and heat maps, the sweeps' findings, the kernels beside fla), each section
with the command, commit, GPU and date that made it, and its figures drawn beside it."""
