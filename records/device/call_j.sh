#!/usr/bin/env bash
# One device call for the addition table: first one paper-preset run alone on the GPU, timed (the issue's
# "≤ 90 s for 2000 steps"), then the table's runs eight at a time (`lab reproduce addition --per-gpu 8`,
# seed 0 first: finished runs are skipped, so the campaign resumes) until the call's time is spent.
# Run from the repository root with LAB_COMMIT set; writes $OUT/out.tgz (runs without their weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out; mkdir -p $W/single
t0=$(date +%s)
for mixer in ${SINGLE:-transformer falcon-1a.3}; do
  s=$(date +%s)
  timeout 200 python -m lab train --task addition --mixer $mixer --preset addition-paper --out /tmp/single/$mixer \
    --results /tmp/single --no-progress > $W/single/$mixer.log 2>&1 || echo "$mixer exited $?"
  echo "single $mixer: $(( $(date +%s) - s )) s (process start to exit)" | tee -a $W/single/times.txt
  cp /tmp/single/$mixer/metrics.csv $W/single/$mixer.metrics.csv 2>/dev/null
  cp /tmp/single/$mixer/evals.csv $W/single/$mixer.evals.csv 2>/dev/null
done
timeout --signal=INT --kill-after=20 $(( ${BUDGET_S:-560} - ($(date +%s) - t0) )) \
  python -m lab reproduce addition --seeds 1 --per-gpu 8 > $W/reproduce_console.log 2>&1 || echo "reproduce exited $?"
echo "reproduce stopped at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
  -C "$PWD/results" addition runs lab.db
cat $W/single/times.txt; tail -5 $W/reproduce_console.log
grep "^|" results/addition/table.md 2>/dev/null | head -20
