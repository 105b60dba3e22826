#!/usr/bin/env bash
# Device calls planned for the next session on two H200s: Falcon-3's last seed, more seeds of the longer
# schedule, and Falcon-3's two Triton parts measured.
# GPU 0: CHECKS=1 (first call only): the GPU tests of falcon_lab/kernels/falcon/triton_eig4.py and triton_tril_inverse.py
#        (the falcon-3 layer takes them and matches eigvalsh and solve_triangular),
#        `records/device/bench_falcon3_parts.py` (each against what it replaces at the packed shape), the
#        falcon-3 layer profile and `lab bench step` of Falcon-3 at the packed shape against
#        records/bench/step-packed/d1c7a5e/ (407.2 ms), and of falcon-3a.3 (110.5 ms there), now on the
#        falcon-1a kernels by its lags (falcon_lab/kernels/falcon/triton_falcon3a.py, GPU-tested here first); then campaign B: `lab reproduce addition --preset packed
#        --rows falcon-3 --seeds 3`, compiled (seed 2, the table's last run: about 14 minutes, two calls), only
#        when those GPU tests passed (the run takes the kernels).
# GPU 1: campaign C: falcon-1.3 over 4000 steps with the ramp over 3000 (records/addition/packed-4000), seeds
#        SEEDS_C (default 5: seeds 2-4 new, about 5 minutes each, one after another).
# Campaigns stopped by the call's end (SIGINT: each run stops after its step with a checkpoint) resume in the
# next call on the same warm machine, made WITHOUT `carry`. SKIP_B=1 / SKIP_C=1 leave a campaign out.
# Run from the repository root with LAB_COMMIT and BUDGET_S set; writes $OUT/out.tgz (no weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out_t; mkdir -p $W
t0=$(date +%s); stamp=$(date -u +%H%M%S)
left() { local l=$(( ${BUDGET_S:-540} - ($(date +%s) - t0) )); echo $(( l > 1 ? l : 1 )); }  # timeout 0 would mean none
gpu0() {
  if [ "${CHECKS:-0}" = 1 ]; then
    CUDA_VISIBLE_DEVICES=0 timeout 150 python -m pytest -q tests/test_triton_eig4.py tests/test_triton_tril_inverse.py \
      tests/test_falcon3_triton_parts.py \
      > $W/test_falcon3_parts.log 2>&1
    local rc=$?; echo "falcon-3 parts GPU tests exited $rc ($(tail -n 1 $W/test_falcon3_parts.log))"
    # Falcon-3's runs take both kernels: with their GPU tests failing they would train on them; leave them out
    if [ $rc != 0 ]; then SKIP_B=1; echo "campaign B left out: the GPU tests of the falcon-3 parts failed"; fi
    # falcon-3a on the falcon-1a kernels (no run of this call takes it: not a condition for campaign B)
    CUDA_VISIBLE_DEVICES=0 timeout 150 python -m pytest -q tests/test_triton_falcon3a.py tests/test_mixers_triton.py \
      > $W/test_falcon3a_triton.log 2>&1; echo "falcon-3a triton GPU tests exited $? ($(tail -n 1 $W/test_falcon3a_triton.log))"
    CUDA_VISIBLE_DEVICES=0 PYTHONPATH=$PWD timeout 90 python records/device/bench_falcon3_parts.py \
      > $W/bench_falcon3_parts.log 2>&1; echo "bench_falcon3_parts exited $?"; cat $W/bench_falcon3_parts.log
    CUDA_VISIBLE_DEVICES=0 PYTHONPATH=$PWD timeout 90 python records/device/profile_falcon3.py --rule falcon-3 \
      > $W/profile_falcon-3.log 2>&1; echo "profile exited $?"; head -n 1 $W/profile_falcon-3.log
    CUDA_VISIBLE_DEVICES=0 timeout 180 python -m lab bench step --preset addition-paper --mixers falcon-3,falcon-3a.3 --steps 10 \
      --set train.compile=true --set data.packing=true --set data.seq_len=256 --out $W/bench > $W/bench.log 2>&1
    echo "bench exited $? at $(( $(date +%s) - t0 )) s"
  fi
  if [ "${SKIP_B:-0}" != 1 ]; then
    CUDA_VISIBLE_DEVICES=0 timeout --signal=INT --kill-after=50 $(left) python -m lab reproduce addition \
      --preset packed --gpus 1 --seeds 3 --rows falcon-3 --set train.compile=true --out results/addition/packed \
      > $W/console_B_$stamp.log 2>&1
    echo "campaign B stopped: exit $? at $(( $(date +%s) - t0 )) s"
  fi
}
gpu1() {
  if [ "${SKIP_C:-0}" != 1 ]; then
    CUDA_VISIBLE_DEVICES=1 timeout --signal=INT --kill-after=50 $(left) python -m lab reproduce addition \
      --preset packed --gpus 1 --seeds ${SEEDS_C:-5} --rows falcon-1.3 --set train.compile=true --max-steps 4000 \
      --set data.ramp_steps=3000 --out results/addition/packed-4000 > $W/console_C_$stamp.log 2>&1
    echo "campaign C stopped: exit $? at $(( $(date +%s) - t0 )) s"
  fi
}
gpu0 & gpu1 & wait
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
  -C "$PWD/results" addition runs lab.db
[ -f $W/bench/step.md ] && echo "bench: $(cut -d'|' -f2,7,13,14 $W/bench/step.md | tail -n 2 | tr '\n' ' ')"
for f in $W/console_*_$stamp.log; do echo "== $f"; grep -v "^step\|Warning\|warn" $f | tail -n 4; done
