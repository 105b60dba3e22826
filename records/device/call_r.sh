#!/usr/bin/env bash
# Device calls of 2026-11-30 (third session of the day) on two H200s. As call_q.sh, with the first phase in
# parallel on the two GPUs:
#   GPU 0: GPU_TEST=1: the GPU tests of train.cuda_graphs (tests/test_train.py -m gpu -k cuda_graphs: eager,
#          and the compiled forward captured); BENCH_23=1: then `lab bench step` of falcon-2 and falcon-3 at the
#          packed preset's shape (256 rows of 256 positions), compiled, alone on the GPU.
#   GPU 1: SINGLES=1: the "2000 steps in <= 90 s", one run at a time at the paper's setting
#          (`--preset addition-paper`, SINGLE_SET, default compile + cuda graphs): falcon-1a.3, then falcon-1.3
#          (timing runs: they go to /tmp/single, not to the table).
# Then the packed campaigns (compiled, `lab reproduce addition --preset packed`):
#   A: falcon-1.3 with an 8-wide short convolution, SEEDS_A seeds (records/addition/packed-conv8)
#   B: ROWS_B, SEEDS_B seeds (records/addition/packed)
# SKIP_A=1 leaves A out; SKIP_B=1 leaves B out.
# Campaigns stopped by the call's end (SIGINT: each run stops after its step with a checkpoint) resume in
# the next call on the same warm machine, made WITHOUT `carry`.
# Run from the repository root with LAB_COMMIT and BUDGET_S set; writes $OUT/out.tgz (no weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out_r; mkdir -p $W/single
t0=$(date +%s); stamp=$(date -u +%H%M%S)
SINGLE_SET=${SINGLE_SET:---set train.cuda_graphs=true --set train.compile=true}
single() {  # GPU, mixer
  local s=$(date +%s)
  CUDA_VISIBLE_DEVICES=$1 timeout 240 python -m lab train --task addition --mixer $2 --preset addition-paper \
    $SINGLE_SET --results /tmp/single --no-progress > $W/single/$2.log 2>&1 || echo "$2 exited $?"
  echo "single $2 ($SINGLE_SET) on GPU $1: $(( $(date +%s) - s )) s (process start to exit)" | tee -a $W/single/times.txt
  for f in /tmp/single/runs/*/config.yaml; do
    grep -q "mixer: $2$" $f && cp $(dirname $f)/metrics.csv $W/single/$2.metrics.csv && cp $(dirname $f)/evals.csv $W/single/$2.evals.csv
  done
}
gpu0() {
  if [ "${GPU_TEST:-0}" = 1 ]; then
    CUDA_VISIBLE_DEVICES=0 timeout 300 python -m pytest -q -m gpu tests/test_train.py -k cuda_graphs \
      -p no:cacheprovider > $W/gpu_test_cuda_graphs.log 2>&1; echo "GPU tests exited $?"; tail -n 3 $W/gpu_test_cuda_graphs.log
  fi
  if [ "${BENCH_23:-0}" = 1 ]; then
    CUDA_VISIBLE_DEVICES=0 timeout 200 python -m lab bench step --preset addition-paper --mixers falcon-1.3,falcon-2,falcon-3 \
      --steps 10 --set train.compile=true --set data.packing=true --set data.seq_len=256 --out $W/bench_23 \
      > $W/bench_23.log 2>&1; echo "bench falcon-2/3 exited $?"; cat $W/bench_23/step.md 2>/dev/null | head -n 8
  fi
}
gpu1() { if [ "${SINGLES:-0}" = 1 ]; then single 1 falcon-1a.3; single 1 falcon-1.3; fi; }
gpu0 & gpu1 & wait
left=$(( ${BUDGET_S:-540} - ($(date +%s) - t0) ))
campaign() {  # name, then lab reproduce addition arguments
  local name=$1; shift
  timeout --signal=INT --kill-after=50 $left python -m lab reproduce addition --preset packed --gpus 2 "$@" \
    > $W/console_${name}_$stamp.log 2>&1
  echo "campaign $name stopped: exit $? at $(( $(date +%s) - t0 )) s"
}
[ "${SKIP_A:-0}" = 1 ] || campaign A --seeds ${SEEDS_A:-3} --per-gpu 2 --rows falcon-1.3 --set train.compile=true \
  --set model.mixer_options.conv_size=8 --out results/addition/packed-conv8 &
[ "${SKIP_B:-0}" = 1 ] || campaign B --seeds ${SEEDS_B:-1} --per-gpu 2 --rows ${ROWS_B:-deltanet,gated-deltanet,falcon-2a} --set train.compile=true \
  --out results/addition/packed &
if [ -n "${ROWS_C:-}" ]; then
  campaign C --seeds 1 --per-gpu 1 --rows $ROWS_C --set train.compile=true --max-steps 6000 \
    --set data.ramp_steps=4500 --out results/addition/packed-6000 &
fi
wait
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
  -C "$PWD/results" addition runs lab.db
cat $W/single/times.txt 2>/dev/null
for f in $W/console_*_$stamp.log; do echo "== $f"; grep -v "^step\|Warning\|warn" $f | tail -n 4; done
