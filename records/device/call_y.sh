#!/usr/bin/env bash
# Device calls on two H200s: digit positions (`model.abacus`, Abacus embeddings) at the paper's size in the
# packed regime over the long schedule (4000 steps, the ramp over 3000: beside records/addition/packed-4000).
# GPU 0: one seed of falcon-1.3 and Falcon-2 (records/addition/packed-abacus), two at once; GPU 1: three seeds of
# the transformer without RoPE (packed-abacus-nope), three at once. On a CPU at
# widths 1-8 the transformer without RoPE with digit positions answered width 9 (85% at step 5000 of 6000, one seed of two)
# (records/addition/cpu_probe.md). The offset reaches 32, so training covers the indices of widths 33-48.
# CHECKS=1 (first call): 60-step compiled runs with digit positions first, falcon-1.3 on GPU 0 and the
# transformer without RoPE on GPU 1: the random offset and the cumulative maxima under torch.compile on a GPU
# have not run before; the campaigns run only if both pass.
# Runs stop with a checkpoint (SIGINT) when the call's time is up and resume in the next call on the same warm
# machine (no `carry` after the first). Run from the repository root with LAB_COMMIT (40 hex digits) and
# BUDGET_S set; writes $OUT/out.tgz (no weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out_x; mkdir -p $W
t0=$(date +%s); stamp=$(date -u +%H%M%S)
left() { local l=$(( ${BUDGET_S:-540} - ($(date +%s) - t0) )); echo $(( l > 1 ? l : 1 )); }
ok=1
if [ "${CHECKS:-0}" = 1 ]; then
  CUDA_VISIBLE_DEVICES=0 timeout 240 python -m lab train --preset addition-paper --mixer falcon-1.3 --max-steps 60 \
    --no-progress --set train.val_every=30 --set train.compile=true --set model.abacus=32 \
    --results $W/check > $W/check.log 2>&1 &
  p0=$!
  CUDA_VISIBLE_DEVICES=1 timeout 240 python -m lab train --preset addition-paper --mixer transformer --max-steps 60 \
    --no-progress --set train.val_every=30 --set train.compile=true --set model.abacus=32 \
    --set model.mixer_options.rope=false --results $W/check_nope > $W/check_nope.log 2>&1 &
  p1=$!
  wait $p0 || ok=0
  wait $p1 || ok=0
  echo "abacus checks: exit ok=$ok at $(( $(date +%s) - t0 )) s"; tail -n 3 $W/check.log $W/check_nope.log
fi
if [ $ok = 1 ]; then
  # The Falcon rows on GPU 0; on GPU 1 the transformer without RoPE (its own campaign and table: `rope` is a
  # transformer option).
  CUDA_VISIBLE_DEVICES=0 timeout --signal=INT --kill-after=50 $(left) python -m lab reproduce addition --preset packed \
    --gpus 1 --per-gpu 2 --seeds 1 --rows falcon-1.3,falcon-2 --set train.compile=true --set model.abacus=32 \
    --max-steps 4000 --set data.ramp_steps=3000 \
    --out results/addition/packed-abacus > $W/console_A_$stamp.log 2>&1 &
  CUDA_VISIBLE_DEVICES=1 timeout --signal=INT --kill-after=50 $(left) python -m lab reproduce addition --preset packed \
    --gpus 1 --per-gpu 3 --seeds 3 --rows transformer --set train.compile=true --set model.abacus=32 \
    --max-steps 4000 --set data.ramp_steps=3000 \
    --set model.mixer_options.rope=false --out results/addition/packed-abacus-nope > $W/console_B_$stamp.log 2>&1
  wait
  echo "campaigns A and B stopped at $(( $(date +%s) - t0 )) s"
fi
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
  -C "$PWD/results" addition runs lab.db
for f in $W/console_[AB]_$stamp.log; do [ -f "$f" ] && grep -v "^step\|Warning\|warn" "$f" | tail -n 5; done
exit 0
