#!/usr/bin/env bash
# Device call: the same-time table's training step with its samples kept apart, each slow row on its fused kernels
# (backend auto) beside the PyTorch chunk form it ran on before (the commits after 16dedb6 put falcon-3/3a's packed
# sequences, RetNet and Mamba-2 on Triton kernels), eager, 10 timed steps at the table's shape (256 rows of 256
# positions). Then one compiled step of each row (what the table trains). Run from the repository root with
# LAB_COMMIT set; first runs the new paths' tests on the GPU (gpu_tests.log); writes $OUT/auto, $OUT/chunk,
# $OUT/compiled (step.md, step.csv) and prints the tables.
#   LAB_COMMIT=<sha> bash records/device/step_apart.sh   # about 540 s: TEST_S=120, then three parts of PART_S=140
set -u
export PYTHONUNBUFFERED=1
# every failed test's report, written as it fails (tests/conftest.py): a run cut by its limit still says why
export LAB_TEST_FAILURES=$OUT/gpu_failures.log
# since 2026-12-05: Gated DeltaNet on falcon-1's kernels, and RetNet's, Gated DeltaNet's and falcon-3a's samples as
# packed sequences rather than padded rows (records/bench/samples-packed/)
ROWS=${ROWS:-retnet,gated-deltanet,falcon-3a.3,falcon-3,falcon-1a.3,mamba2}
B="python -m lab bench step --preset same-time --steps ${STEPS:-10}"
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
# first CUDA's own count of a packed step's host waits (one layer against two: tests/test_packed_facts.py, since
# a2c89c7), then the new paths against float64 on the GPU: RetNet's and Mamba-2's sizes in bf16, falcon-3/3a's
# packed rows
timeout ${TEST_S:-120} python -m pytest -q -p no:cacheprovider -rs tests/test_packed_facts.py tests/test_decayed.py \
  tests/test_delta_rule.py tests/test_triton_falcon3a.py tests/test_triton_falcon3.py \
  -k "gpu or packed or oracle or samples" > $OUT/gpu_tests.log 2>&1
tail -3 $OUT/gpu_tests.log
[ -s $OUT/gpu_failures.log ] && grep '^FAILED' $OUT/gpu_failures.log
timeout ${PART_S:-140} $B --mixers $ROWS --out $OUT/auto > $OUT/auto.log 2>&1
timeout ${PART_S:-140} $B --mixers $ROWS --set model.mixer_options.backend=chunk --out $OUT/chunk > $OUT/chunk.log 2>&1
timeout ${PART_S:-140} $B --mixers $ROWS,falcon-2 --set train.compile=true --out $OUT/compiled \
  > $OUT/compiled.log 2>&1
for part in auto chunk compiled; do echo "== $part"; cat $OUT/$part/step.md 2>/dev/null || tail -3 $OUT/$part.log; done
