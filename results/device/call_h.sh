#!/usr/bin/env bash
# A short device call for the kernels' last two open figures: falcon-1a / falcon-2a against the float64
# reference at real sizes up to T = 16384 (every gradient), and falcon-1 / falcon-1a beside their own PyTorch
# chunk forms at T = 4096 (the "≥ 20× the PyTorch chunk form" target). Writes straight under $OUT.
set -u
timeout 200 python -m pytest -q -s -m gpu tests/test_triton_inner_product.py -k real_sizes -p no:cacheprovider \
  > "$OUT/gpu_check_inner_product.log" 2>&1; echo "pytest exited $?"
grep "GPUCHECK\|passed\|failed" "$OUT/gpu_check_inner_product.log" | cut -c1-160
timeout --signal=INT 120 python -m lab bench kernels --shape 4,4096,16,128 --rule falcon-1a --rule falcon-1 \
  --chunk-forms --rep 50 --out "$OUT" 2>&1 | cut -c1-120
for rule in falcon-1a falcon-2a; do  # device time per kernel, as gpu_check_regression profiles falcon-1/2
  timeout 60 python -c "import json, sys; from kernels.falcon.gpu_check_regression import profile; \
print(json.dumps({'profile_ms': sys.argv[1], 'shape': [1, 16384, 16, 128], \
'kernels': profile(sys.argv[1], (1, 16384, 16, 128))}))" $rule | tee -a "$OUT/profile_inner_product.log"
done
