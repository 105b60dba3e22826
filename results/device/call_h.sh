#!/usr/bin/env bash
# A last short device call: falcon-1 and falcon-1a beside their own PyTorch chunk forms at T = 4096, for the
# "≥ 20× the PyTorch chunk form" target. Writes kernels.csv / kernels.md straight under $OUT after every row.
set -u
timeout --signal=INT 50 python -m lab bench kernels --shape 4,4096,16,128 --rule falcon-1a --rule falcon-1 \
  --chunk-forms --rep 50 --out "$OUT" 2>&1 | cut -c1-120
