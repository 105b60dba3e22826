#!/usr/bin/env bash
# Device call 2 of 2 for the addition table, on the machine call_l.sh left warm: both campaigns resume their
# runs from the checkpoints written when call_l.sh stopped them, run to the call's end, and write their tables.
# Run from the repository root with LAB_COMMIT and BUDGET_S set; writes $OUT/out.tgz (no weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out2; mkdir -p $W
t0=$(date +%s)
ls results/runs | wc -l
CURRICULUM="--set data.curriculum=linear --set data.start_width=1 --set data.ramp_steps=1500"
timeout --signal=INT --kill-after=50 ${BUDGET_S:-540} python -m lab reproduce addition --seeds 1 --gpus 2 \
  --per-gpu 6 > $W/reproduce_console.log 2>&1 &
timeout --signal=INT --kill-after=50 ${BUDGET_S:-540} python -m lab reproduce addition --seeds 1 --gpus 2 \
  --per-gpu 1 --rows falcon-1a.3,transformer $CURRICULUM --out results/addition/curriculum \
  > $W/curriculum_console.log 2>&1 &
wait
echo "campaigns stopped at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
  -C "$PWD/results" addition runs lab.db
tail -4 $W/reproduce_console.log $W/curriculum_console.log
grep "^|" results/addition/table.md | head -16
