#!/usr/bin/env bash
# One device call: every mixer's short GPU run at 300 steps (issue 3's "a few hundred steps"),
# one mixer at a time on the GPU. Run from the repository root with LAB_COMMIT set; writes $OUT/out.tgz.
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out; mkdir -p $W/train
t0=$(date +%s)
timeout --signal=INT --kill-after=15 570 python -m lab bench train --preset small --max-steps 300 --timeout 60 \
  --out $W/train --work /tmp/runs > $W/train/console.log 2>&1 || echo "bench train exited $?"
echo "bench train stopped at $(( $(date +%s) - t0 )) s"
mkdir -p $W/train/logs && cp /tmp/runs/*.log $W/train/logs/ 2>/dev/null
tar czf "$OUT/out.tgz" -C $W .
grep "^|" $W/train/train.md | cut -d'|' -f2-9
