#!/usr/bin/env bash
# The packed curriculum at the paper's size, on two H200s: the lead of the CPU probe (records/addition/
# cpu_probe.md: falcon-1a.3 with a linear curriculum AND several samples per row answered widths 1-5 of 8 in
# 1500 steps, where either alone gave 1-2 or 1-4). Widths 1 -> 32 over the first 1500 of 2000 steps, rows of
# 256 positions packed with samples (2.6 times the 99 one padded sample needs, as 64 is for widths 1-8).
# ROWS (default falcon-1a.3,transformer: one run alone on each GPU), SEEDS, PER_GPU as for call_n.sh; a
# campaign stopped by the call's end resumes in the next call on the same machine.
# Run from the repository root with LAB_COMMIT and BUDGET_S set; writes $OUT/out.tgz (no weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out_o; mkdir -p $W
REGIME="--set data.curriculum=linear --set data.start_width=1 --set data.ramp_steps=1500 --set data.packing=true
  --set data.seq_len=256"
ROWS_ARG=""; [ "${ROWS:-falcon-1a.3,transformer}" != all ] && ROWS_ARG="--rows ${ROWS:-falcon-1a.3,transformer}"
timeout --signal=INT --kill-after=50 ${BUDGET_S:-540} python -m lab reproduce addition --seeds ${SEEDS:-1} \
  --gpus 2 --per-gpu ${PER_GPU:-1} $ROWS_ARG $REGIME --out results/addition/curriculum_packed \
  > $W/console.log 2>&1
echo "campaign stopped: exit $?"
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
  -C "$PWD/results" addition runs lab.db
tail -n 8 $W/console.log
grep "^| [A-Z]" results/addition/curriculum_packed/table.md | head -14 | cut -d'|' -f2,4,6,8
