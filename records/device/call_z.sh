#!/usr/bin/env bash
# Device calls on two H200s after call_y.sh (whose Falcon runs were lost with its machine, unfinished): digit
# positions (`model.abacus=32`) at the paper's size in the packed regime. GPU 0: falcon-1.3 and Falcon-2 over the
# long schedule (4000 steps, ramp over 3000; records/addition/packed-abacus), two at once. GPU 1: the transformer
# without RoPE, seeds 0 and 1, over 8000 steps with the same ramp (3000 steps), so 5000 steps at the full width
# (records/addition/packed-abacus-nope-8000); its 4000-step seed 0 answered width 33 in 8% of samples, still rising.
# Runs stop with a checkpoint (SIGINT) when the call's time is up and resume in the next call on the same warm
# machine (no `carry`). Run from the repository root with LAB_COMMIT (40 hex digits) and BUDGET_S set; writes
# $OUT/out.tgz (no weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out_x; mkdir -p $W
t0=$(date +%s); stamp=$(date -u +%H%M%S)
left() { local l=$(( ${BUDGET_S:-540} - ($(date +%s) - t0) )); echo $(( l > 1 ? l : 1 )); }
ok=1
if [ $ok = 1 ]; then
  # The Falcon rows on GPU 0; on GPU 1 the transformer without RoPE (its own campaign and table: `rope` is a
  # transformer option).
  CUDA_VISIBLE_DEVICES=0 timeout --signal=INT --kill-after=50 $(left) python -m lab reproduce addition --preset packed \
    --gpus 1 --per-gpu 2 --seeds 1 --rows falcon-1.3,falcon-2 --set train.compile=true --set model.abacus=32 \
    --max-steps 4000 --set data.ramp_steps=3000 \
    --out results/addition/packed-abacus > $W/console_A_$stamp.log 2>&1 &
  CUDA_VISIBLE_DEVICES=1 timeout --signal=INT --kill-after=50 $(left) python -m lab reproduce addition --preset packed \
    --gpus 1 --per-gpu 2 --seeds 2 --rows transformer --set train.compile=true --set model.abacus=32 \
    --max-steps 8000 --set data.ramp_steps=3000 \
    --set model.mixer_options.rope=false --out results/addition/packed-abacus-nope-8000 > $W/console_B_$stamp.log 2>&1
  wait
  echo "campaigns A and B stopped at $(( $(date +%s) - t0 )) s"
fi
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
  -C "$PWD/results" addition runs lab.db
for f in $W/console_[AB]_$stamp.log; do [ -f "$f" ] && grep -v "^step\|Warning\|warn" "$f" | tail -n 5; done
exit 0
