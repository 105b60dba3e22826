#!/usr/bin/env bash
# The packed preset (`lab reproduce addition --preset packed`: the paper's setting with widths 1 -> 32 over
# the first 1500 steps and rows of 256 positions packed with samples; records/addition/packed.md) on two
# H200s: more seeds of the table, or a longer schedule with EXTRA (e.g. EXTRA="--max-steps 6000 --set
# data.ramp_steps=4500" OUTDIR=results/addition/packed-6000).
# PRESET: packed (default) or packed-constant (the same with no learning-rate decay).
# Each run that finishes writes its per-position accuracy (runs/<id>/positions.csv, `lab plot positions`).
# Merge the outputs here with `lab runs merge <the folder out.tgz was unpacked in>`.
# ROWS: comma-separated rows (default every row but falcon-2 and falcon-3, whose 2000 steps take an hour
# each at this size), or "all". SEEDS (default 3), PER_GPU (default 4), BUDGET_S (default 540).
# A campaign stopped by the call's end (SIGINT: each run stops after its step with a checkpoint) resumes in
# the next call on the same warm machine -- make that next call WITHOUT `carry`, which would replace the
# machine's results/runs and lab.db with this checkout's (and restart the stopped runs from step 0).
# Run from the repository root with LAB_COMMIT set; writes $OUT/out.tgz (no weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out_p; mkdir -p $W
FAST=transformer,retnet,mamba2,falcon-1a.1,falcon-1a.2,falcon-1a.3,falcon-3a.3,falcon-1.3,deltanet,gated-deltanet,falcon-2a
ROWS_ARG=""; [ "${ROWS:-$FAST}" != all ] && ROWS_ARG="--rows ${ROWS:-$FAST}"
OUTDIR=${OUTDIR:-results/addition/${PRESET:-packed}}
LOG=$W/console_$(date -u +%H%M%S).log
timeout --signal=INT --kill-after=50 ${BUDGET_S:-540} python -m lab reproduce addition --preset ${PRESET:-packed} \
  --seeds ${SEEDS:-3} --gpus 2 --per-gpu ${PER_GPU:-4} $ROWS_ARG ${EXTRA:-} --out $OUTDIR > $LOG 2>&1
echo "campaign stopped: exit $?"
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
  -C "$PWD/results" addition runs lab.db
tail -n 12 $LOG
grep "^| [A-Z]" $OUTDIR/table.md | head -14 | cut -d'|' -f2,4,6,8
