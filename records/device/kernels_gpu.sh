#!/usr/bin/env bash
# Device call for the kernels after the layout move (issue 30): every fused kernel's tests on the GPU (float64
# references at real sizes, falcon-3a's one delayed pass, decayed_attention, DeltaNet on falcon-1's kernels, a
# batch past the launch-axis limit), then `lab bench kernels` at the three shapes beside fla (carried as a wheel in
# .whl/). Every log is written under $OUT as it runs. Run from the repository root with LAB_COMMIT set.
source records/device/gpu_env.sh
python -c "import torch, triton, fla; print('torch', torch.__version__, 'triton', triton.__version__, 'fla', fla.__version__)" \
  >> $OUT/gpu.txt 2>&1
t0=$(date +%s)
# TESTS: the files in the order to run them (-v: a run cut by its limit still names every test it passed); the
# first call (commit a1ee0d5) passed falcon-3a's 22 and 39 of falcon-1a/2a's before its 180 s: the rest come first,
# falcon-3's own kernels (never run whole on a GPU; `auto` keeps the chunk form until they pass) before all
TESTS=${TESTS:-"tests/test_triton_falcon3.py tests/test_fla_parity.py tests/test_triton_band.py tests/test_mixers_triton.py tests/test_delta_rule.py
  tests/test_triton_regression.py tests/test_triton_inner_product.py tests/test_falcon3_triton_parts.py
  tests/test_triton_falcon3a.py"}
timeout ${TEST_S:-200} python -m pytest -v -s -p no:cacheprovider $TESTS -rs \
  > $OUT/gpu_tests.log 2>&1; echo "tests rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/times.txt
mkdir -p $OUT/kernels
# SHAPES: --shape arguments (default the bench's three); fla autotunes each op on first use, 25-45 s here
timeout --signal=INT ${BENCH_S:-240} python -m lab bench kernels --out $OUT/kernels --rep ${REP:-50} ${SHAPES:-} \
  > $OUT/kernels/console.log 2>&1; echo "bench rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/times.txt
cat $OUT/gpu.txt; grep -c PASSED $OUT/gpu_tests.log; tail -3 $OUT/gpu_tests.log; grep -E "FAILED|Error" $OUT/gpu_tests.log | head -10
[ -s $OUT/gpu_failures.log ] && grep '^FAILED' $OUT/gpu_failures.log
cut -c1-150 $OUT/kernels/console.log | tail -45
