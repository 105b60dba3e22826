#!/usr/bin/env bash
# A short device call: the kernels' last two open figures, then CUDA graphs' first GPU run.
# The figures: falcon-1a / falcon-2a against the float64 reference at real sizes up to T = 16384
# (every gradient), and falcon-1 / falcon-1a beside their own PyTorch chunk forms at T = 4096 (the
# "≥ 20× the PyTorch chunk form" target), with their profiles. Writes straight under $OUT.
set -u
timeout 200 python -m pytest -q -s -m gpu tests/test_triton_inner_product.py -k real_sizes -p no:cacheprovider \
  > "$OUT/gpu_check_inner_product.log" 2>&1; echo "pytest exited $?"
grep "GPUCHECK\|passed\|failed" "$OUT/gpu_check_inner_product.log" | cut -c1-160
timeout --signal=INT 120 python -m lab bench kernels --shape 4,4096,16,128 --rule falcon-1a --rule falcon-1 \
  --chunk-forms --rep 50 --out "$OUT" 2>&1 | cut -c1-120
for rule in falcon-1a falcon-2a; do  # device time per kernel, as gpu_check_regression profiles falcon-1/2
  timeout 60 python -c "import json, sys; from falcon_lab.kernels.falcon.gpu_check_regression import profile; \
print(json.dumps({'profile_ms': sys.argv[1], 'shape': [1, 16384, 16, 128], \
'kernels': profile(sys.argv[1], (1, 16384, 16, 128))}))" $rule | tee -a "$OUT/profile_inner_product.log"
done
# commit after b70de65: the backward keeps the forward's chunk quantities (KEEP_FOR_BACKWARD); time it at
# the long shape beside kernels.md's recomputing figures (falcon-1 4.96 ms, falcon-2 64.0 ms fwd+bwd)
mkdir -p "$OUT/long"
timeout --signal=INT 90 python -m lab bench kernels --shape 1,16384,16,128 --rule falcon-1 --rule falcon-2 \
  --rep 50 --out "$OUT/long" 2>&1 | grep "falcon" | cut -c1-120
# train.cuda_graphs has never run on a GPU: its test against the eager loss curve, then the step anatomy
timeout 150 python -m pytest -q -s -m gpu tests/test_train.py -k cuda_graphs -p no:cacheprovider \
  > "$OUT/cuda_graphs_test.log" 2>&1; echo "cuda graphs test exited $?"; tail -3 "$OUT/cuda_graphs_test.log"
mkdir -p "$OUT/step_graphs"
timeout 150 python -m lab bench step --preset small --steps 20 --set train.cuda_graphs=true \
  --mixers transformer,falcon-1a.3,falcon-1.3 --out "$OUT/step_graphs" > "$OUT/step_graphs/console.log" 2>&1 \
  || echo "bench step exited $?"
cat "$OUT/step_graphs/step.md" 2>/dev/null | grep "^|" | cut -d'|' -f2-6
