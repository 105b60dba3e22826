#!/usr/bin/env bash
# Device calls planned for the next session on two H200s: the long schedule (4000 steps, the ramp over 3000,
# records/addition/packed-4000) for Falcon-2 and Gated DeltaNet, seeds 0-2, one run per GPU at a time (Falcon-2's
# seed 0, trained on two GPUs, is there: skipped). About 10 minutes a run: each spans two calls, stopped with a
# checkpoint (SIGINT) at the end of one and resumed in the next on the same warm machine, made WITHOUT `carry`.
# PLACE="--gpus 1 --gpus-per-run 2": one run at a time over both GPUs (DDP, about 6.5 minutes a 4000-step
# Falcon-2 run): for a last call, where a run must finish within the call to count.
# DDPCHECK=1 (first call): a 60-step DDP run on both GPUs first, to see that wrapping the model on the current
# stream (falcon_lab/train/trainer.py, CurrentStreamDDP) leaves no AccumulateGrad stream warning; its own results folder.
# Run from the repository root with LAB_COMMIT and BUDGET_S set; writes $OUT/out.tgz (no weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out_v; mkdir -p $W
t0=$(date +%s); stamp=$(date -u +%H%M%S)
left() { local l=$(( ${BUDGET_S:-540} - ($(date +%s) - t0) )); echo $(( l > 1 ? l : 1 )); }
if [ "${DDPCHECK:-0}" = 1 ]; then
  timeout 150 python -m lab train --preset addition-paper --mixer falcon-1.3 --max-steps 60 --devices 2 \
    --no-progress --set train.val_every=30 --results $W/ddpcheck > $W/ddpcheck.log 2>&1
  echo "DDP check exited $? at $(( $(date +%s) - t0 )) s; AccumulateGrad warnings: $(grep -c AccumulateGrad $W/ddpcheck.log)"
  tail -n 2 $W/ddpcheck.log
fi
timeout --signal=INT --kill-after=50 $(left) python -m lab reproduce addition --preset packed ${PLACE:---gpus 2} \
  --seeds ${SEEDS:-3} --rows ${ROWS:-falcon-2,gated-deltanet} --set train.compile=true --max-steps 4000 \
  --set data.ramp_steps=3000 --out results/addition/packed-4000 > $W/console_D_$stamp.log 2>&1
echo "campaign D stopped: exit $? at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
  -C "$PWD/results" addition runs lab.db
grep -v "^step\|Warning\|warn" $W/console_D_$stamp.log | tail -n 8
