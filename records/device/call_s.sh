#!/usr/bin/env bash
# Device calls planned for the next session on two H200s: Falcon-3, the packed table's last row.
# Phase 1 (first call only), in parallel:
#   GPU 0: PROFILE=1: `records/device/profile_falcon3.py` for falcon-3 and falcon-3a (eager, one layer at the
#          packed shape): where falcon-3's 458 ms a step go (records/bench/step-packed/); then BENCH=1:
#          `lab bench step` of falcon-3, falcon-3a.3 and deltanet at the packed shape, compiled, after the chunk
#          loops took their slices by unbind (commit b51f902), against records/bench/step-packed/step.md;
#          on GPU 1 meanwhile, falcon-3 with chunks of 8, 32 and 64 tokens (window_block 32, 128, 256).
#   GPU 1: SINGLE=1: falcon-1a.3 at the paper's setting with compile and CUDA graphs, alone on its GPU and
#          with no other compilation on the host (the last one shared the host with a test's compilation).
# Then campaign B: `lab reproduce addition --preset packed --rows ROWS_B --seeds SEEDS_B --gpus 2 --per-gpu 1`,
# compiled (default: Falcon-3, seeds 0 and 1, one per GPU, about 15 minutes each: two calls or more);
# SKIP_B=1 leaves it out (a first call that only measures). ROWS_C (optional): those rows, seed 0, for 6000
# steps with the ramp over 4500 (results/addition/packed-6000), beside campaign B on the same GPUs.
# Campaigns stopped by the call's end (SIGINT: each run stops after its step with a checkpoint) resume in
# the next call on the same warm machine, made WITHOUT `carry`.
# Run from the repository root with LAB_COMMIT and BUDGET_S set; writes $OUT/out.tgz (no weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out_s; mkdir -p $W/single
t0=$(date +%s); stamp=$(date -u +%H%M%S)
gpu0() {
  if [ "${PROFILE:-0}" = 1 ]; then
    for rule in falcon-3 falcon-3a; do
      CUDA_VISIBLE_DEVICES=0 PYTHONPATH=$PWD timeout 120 python records/device/profile_falcon3.py --rule $rule \
        > $W/profile_$rule.log 2>&1; echo "profile $rule exited $?"; head -n 2 $W/profile_$rule.log
    done
  fi
}
gpu1() {
  if [ "${SINGLE:-0}" = 1 ]; then
    local s=$(date +%s)
    CUDA_VISIBLE_DEVICES=1 timeout 240 python -m lab train --task addition --mixer falcon-1a.3 --preset addition-paper \
      --set train.cuda_graphs=true --set train.compile=true --results /tmp/single --no-progress \
      > $W/single/falcon-1a.3.log 2>&1 || echo "single exited $?"
    echo "single falcon-1a.3 (compile + cuda graphs) on GPU 1: $(( $(date +%s) - s )) s (process start to exit)" \
      | tee -a $W/single/times.txt
    local run=$(dirname $(ls /tmp/single/runs/*/metrics.csv | head -n 1))
    cp $run/metrics.csv $W/single/falcon-1a.3.metrics.csv; cp $run/evals.csv $W/single/falcon-1a.3.evals.csv
  fi
}
gpu0 & gpu1 & wait
if [ "${BENCH:-0}" = 1 ]; then  # both GPUs free again: the benches on GPU 0 and GPU 1
  packed="--steps 10 --set train.compile=true --set data.packing=true --set data.seq_len=256"
  CUDA_VISIBLE_DEVICES=0 timeout 240 python -m lab bench step --preset addition-paper \
    --mixers falcon-3,falcon-3a.3,deltanet $packed --out $W/bench > $W/bench.log 2>&1 &
  # falcon-3's chunk length C = window_block / 4 (default 64: C = 16); nothing has trained with it yet, so the
  # default may still move to the fastest (it is part of a run's id)
  ( for wb in 32 128 256; do
      CUDA_VISIBLE_DEVICES=1 timeout 150 python -m lab bench step --preset addition-paper --mixers falcon-3 $packed \
        --set model.mixer_options.window_block=$wb --out $W/bench_wb$wb > $W/bench_wb$wb.log 2>&1
    done ) &
  wait; echo "benches done at $(( $(date +%s) - t0 )) s"
fi
left=$(( ${BUDGET_S:-540} - ($(date +%s) - t0) ))
if [ "${SKIP_B:-0}" != 1 ]; then
  ( timeout --signal=INT --kill-after=50 $left python -m lab reproduce addition --preset packed --gpus 2 --per-gpu 1 \
      --seeds ${SEEDS_B:-2} --rows ${ROWS_B:-falcon-3} --set train.compile=true --out results/addition/packed \
      > $W/console_B_$stamp.log 2>&1
    echo "campaign B stopped: exit $? at $(( $(date +%s) - t0 )) s" ) &
fi
if [ -n "${ROWS_C:-}" ]; then  # the longer schedule (packed.md, "When the runs that learn the middle learn it")
  ( timeout --signal=INT --kill-after=50 $left python -m lab reproduce addition --preset packed --gpus 2 --per-gpu 1 \
      --seeds 1 --rows $ROWS_C --set train.compile=true --max-steps 6000 --set data.ramp_steps=4500 \
      --out results/addition/packed-6000 > $W/console_C_$stamp.log 2>&1
    echo "campaign C stopped: exit $? at $(( $(date +%s) - t0 )) s" ) &
fi
wait
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
  -C "$PWD/results" addition runs lab.db
cat $W/single/times.txt 2>/dev/null
for f in $W/bench/step.md $W/bench_wb*/step.md; do echo "$f: $(cut -d'|' -f2,7,13,14 $f 2>/dev/null | tail -n 3 | tr '\n' ' ')"; done
for f in $W/console_*_$stamp.log; do echo "== $f"; grep -v "^step\|Warning\|warn" $f | tail -n 4; done
