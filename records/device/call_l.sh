#!/usr/bin/env bash
# Device call 1 of 2 for the addition table on two H200s (call_m.sh continues it on the same machine).
# GPU 0: falcon-2a's fp32 backward at T = 16384 (the case that ran out of shared memory before a446b8c), then
# the transformer's paper-preset run alone (timed; its table run finished in round 1, so it goes to /tmp).
# GPU 1 at the same time: falcon-1a.3's paper-preset run alone (timed; it is also its table run, seed 0).
# Then both GPUs: seed 0 of every row (`lab reproduce addition`, six runs per GPU) beside the curriculum
# campaign (falcon-1a.3 and the transformer, widths 1 -> 32 over 1500 steps), until SIGINT ends every run
# after its current step with a checkpoint there. Runs stay on the machine for call_m.sh.
# Run from the repository root with LAB_COMMIT and BUDGET_S set; writes $OUT/out.tgz (no weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out; mkdir -p $W/single
t0=$(date +%s)
single() {  # GPU, mixer, results folder
  local s=$(date +%s)
  CUDA_VISIBLE_DEVICES=$1 timeout 240 python -m lab train --task addition --mixer $2 --preset addition-paper \
    --results $3 --no-progress > $W/single/$2.log 2>&1 || echo "$2 exited $?"
  echo "single $2 on GPU $1 alone: $(( $(date +%s) - s )) s (process start to exit)" | tee -a $W/single/times.txt
}
(CUDA_VISIBLE_DEVICES=0 timeout 100 python -m pytest -q -s -m gpu tests/test_triton_inner_product.py \
   -k "real_sizes and float32-1x16384" -p no:cacheprovider > $W/gpu_check_fp32_16384.log 2>&1
 echo "fp32 T=16384 check exited $?"; single 0 transformer /tmp/single) &
single 1 falcon-1a.3 results &
wait
cp /tmp/single/runs/*/metrics.csv $W/single/transformer.metrics.csv 2>/dev/null
left=$(( ${BUDGET_S:-570} - ($(date +%s) - t0) ))
CURRICULUM="--set data.curriculum=linear --set data.start_width=1 --set data.ramp_steps=1500"
timeout --signal=INT --kill-after=50 $left python -m lab reproduce addition --seeds 1 --gpus 2 --per-gpu 6 \
  > $W/reproduce_console.log 2>&1 &
timeout --signal=INT --kill-after=50 $left python -m lab reproduce addition --seeds 1 --gpus 2 --per-gpu 1 \
  --rows falcon-1a.3,transformer $CURRICULUM --out results/addition/curriculum > $W/curriculum_console.log 2>&1 &
wait
echo "campaigns stopped at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
  -C "$PWD/results" addition runs lab.db
cat $W/single/times.txt; grep "passed\|failed" $W/gpu_check_fp32_16384.log | tail -2
tail -4 $W/reproduce_console.log $W/curriculum_console.log
