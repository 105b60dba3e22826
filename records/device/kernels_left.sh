#!/usr/bin/env bash
# Device call: the GPU checks issue 30 still lacks, each part under its own limit, then the packed-sequence prefix of
# decayed_attention (7f3cd66) timed in the same-time table's compiled step. About 480 s; fla carried in .whl/.
#   1. falcon-2's solve forms at D = 128 and in bf16 (passed on an H100, records/bench/gpu-checks-2026-12-05/; since
#      then "inverses" is the default)
#   2. the baselines' ops against fla's own: DeltaNet against `chunk_delta_rule`, Gated DeltaNet and RetNet forms
#      against `chunk_gated_delta_rule` and `chunk_simple_gla` forwards (tests/test_fla_parity.py)
#   3. a batch past CUDA's 65,535 launch rows (B·H = 65,600) on falcon-1a's and falcon-1's kernels
#   4. the count of a packed step's synchronisations (falcon-1a.3 failed unnamed in records/bench/step-apart-2026-12-05)
#      and decayed_attention's tests after the prefix change
#   5. falcon-3's and falcon-3a's fwd+bwd profiled at the bench's shapes beside falcon-1a's (records/device/profile_rules.py)
#   6. `lab bench step --preset same-time` compiled, RetNet and falcon-3a.3 (65 of 138 and 145 GPU ms a step went to
#      the old prefix's running sum on an H100) and Gated DeltaNet beside them
# Every failed test's report is written as it fails ($OUT/gpu_failures.log), so a part cut by its limit still says
# what failed. Run from the repository root with LAB_COMMIT set:
#   LAB_COMMIT=<sha> bash records/device/kernels_left.sh
#   LAB_COMMIT=<sha> F2_S=0 GRID_S=120 bash records/device/kernels_left.sh   # what 2026-12-05's shared call left
# A part's limit 0 skips it (F2_S, FLA_S, GRID_S, PACKED_S, PROF_S; STEP_S=0 the step's timing).
source records/device/gpu_env.sh
t0=$(date +%s)
part() {  # part <name> <seconds> <pytest arguments>
  local name=$1 limit=$2; shift 2
  [ "$limit" = 0 ] && return  # a part's limit 0 skips it
  timeout $limit python -m pytest -v -p no:cacheprovider -rs "$@" > $OUT/$name.log 2>&1
  echo "$name rc=$? at $(( $(date +%s) - t0 )) s: $(grep -c PASSED $OUT/$name.log) passed, $(grep -c FAILED $OUT/$name.log) failed" \
    | tee -a $OUT/times.txt
}
part f2_solve ${F2_S:-120} tests/test_triton_regression.py -k solve_forms_gpu
part fla_parity ${FLA_S:-100} tests/test_fla_parity.py
part launch_limit ${GRID_S:-60} tests/test_triton_inner_product.py tests/test_delta_rule.py -k "grid_limit or launch_limit"
part packed ${PACKED_S:-90} tests/test_packed_facts.py tests/test_decayed.py -k "gpu or packed or oracle or samples"
if [ "${PROF_S:-90}" != 0 ]; then  # falcon-3's and falcon-3a's misses profiled at the bench's shapes (issue 30)
  PYTHONPATH=$PWD:${PYTHONPATH:-} timeout ${PROF_S:-90} python records/device/profile_rules.py --row falcon-3 \
    --row falcon-3a --row falcon-1a --shape 8,2048,12,64 --shape 4,4096,16,128 > $OUT/profile.log 2>&1
  echo "profile rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/times.txt
fi
if [ "${STEP_S:-110}" != 0 ]; then  # STEP_S=0 skips the timing (a call whose GPU is shared with runs)
  timeout --signal=INT ${STEP_S:-110} python -m lab bench step --preset same-time --steps 10 \
    --mixers retnet,falcon-3a.3,gated-deltanet --set train.compile=true --out $OUT/compiled > $OUT/compiled.log 2>&1
  echo "step rc=$? at $(( $(date +%s) - t0 )) s" | tee -a $OUT/times.txt
fi
cat $OUT/gpu.txt; [ -s $OUT/gpu_failures.log ] && grep '^FAILED' $OUT/gpu_failures.log
[ -f $OUT/compiled.log ] && grep '^mixer' $OUT/compiled.log | cut -c1-220
true
