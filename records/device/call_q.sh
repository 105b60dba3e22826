#!/usr/bin/env bash
# Device calls of 2026-11-30 (second session of the day) on two H200s.
# GPU_TEST=1: first the GPU tests of train.cuda_graphs (tests/test_train.py -m gpu -k cuda_graphs), on GPU 0.
# SINGLES=1 (first call only): the issue's "2000 steps in <= 90 s" with `train.cuda_graphs=true`, one run alone
#   on each GPU at the paper's setting (`--preset addition-paper`): falcon-1a.3 on GPU 0, falcon-1.3 on GPU 1
#   (timing runs: they go to /tmp/single, not to the table). SINGLE_SET replaces their `--set train.cuda_graphs=true`
#   (e.g. SINGLE_SET="--set train.cuda_graphs=true --set train.compile=true").
# Then two packed campaigns at once (compiled, `lab reproduce addition --preset packed`):
#   A: falcon-1.3 with an 8-wide short convolution, three seeds (records/addition/packed-conv8)
#   B: the rows the paper lacks that had no packed run: DeltaNet, Gated DeltaNet, Falcon-2A, seed 0
#      (records/addition/packed; the table is rebuilt here with every seed after merging)
# SEEDS_A, SEEDS_B: seeds of A and B (3 and 1); ROWS_B: the rows of B; SKIP_A=1 leaves A out.
# C (optional, ROWS_C set): falcon-1.3 for 6000 steps (results/addition/packed-6000).
# Campaigns stopped by the call's end (SIGINT: each run stops after its step with a checkpoint) resume in
# the next call on the same warm machine, made WITHOUT `carry`.
# Run from the repository root with LAB_COMMIT and BUDGET_S set; writes $OUT/out.tgz (no weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out_q; mkdir -p $W/single
t0=$(date +%s); stamp=$(date -u +%H%M%S)
single() {  # GPU, mixer
  local s=$(date +%s)
  CUDA_VISIBLE_DEVICES=$1 timeout 240 python -m lab train --task addition --mixer $2 --preset addition-paper \
    ${SINGLE_SET:---set train.cuda_graphs=true} --results /tmp/single --no-progress > $W/single/$2.log 2>&1 || echo "$2 exited $?"
  echo "single $2 (${SINGLE_SET:---set train.cuda_graphs=true}) on GPU $1 alone: $(( $(date +%s) - s )) s (process start to exit)" | tee -a $W/single/times.txt
  for f in /tmp/single/runs/*/config.yaml; do
    grep -q "mixer: $2$" $f && cp $(dirname $f)/metrics.csv $W/single/$2.metrics.csv && cp $(dirname $f)/evals.csv $W/single/$2.evals.csv
  done
}
if [ "${GPU_TEST:-0}" = 1 ]; then  # the CUDA-graph GPU tests (eager, and the compiled forward captured)
  CUDA_VISIBLE_DEVICES=0 timeout 300 python -m pytest -q -m gpu tests/test_train.py -k cuda_graphs \
    -p no:cacheprovider > $W/gpu_test_cuda_graphs.log 2>&1; echo "GPU tests exited $?"; tail -n 3 $W/gpu_test_cuda_graphs.log
fi
if [ "${SINGLES:-0}" = 1 ]; then
  single 0 falcon-1a.3 & single 1 falcon-1.3 & wait
fi
left=$(( ${BUDGET_S:-540} - ($(date +%s) - t0) ))
campaign() {  # name, then lab reproduce addition arguments
  local name=$1; shift
  timeout --signal=INT --kill-after=50 $left python -m lab reproduce addition --preset packed --gpus 2 "$@" \
    > $W/console_${name}_$stamp.log 2>&1
  echo "campaign $name stopped: exit $? at $(( $(date +%s) - t0 )) s"
}
[ "${SKIP_A:-0}" = 1 ] || campaign A --seeds ${SEEDS_A:-3} --per-gpu 2 --rows falcon-1.3 --set train.compile=true \
  --set model.mixer_options.conv_size=8 --out results/addition/packed-conv8 &
campaign B --seeds ${SEEDS_B:-1} --per-gpu 2 --rows ${ROWS_B:-deltanet,gated-deltanet,falcon-2a} --set train.compile=true \
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
