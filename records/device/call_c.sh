#!/usr/bin/env bash
# One device call: falcon-1.3's short run for `lab bench train` (left out by call B's limit), then the
# addition table's paper rows at the paper preset, one seed, eight runs sharing the GPU, until the call's
# time is spent (the campaign resumes: finished runs are skipped). Run from the repository root with
# LAB_COMMIT set.
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out; mkdir -p $W/train
pack() { tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
         -C "$PWD/results" addition runs lab.db ; }
t0=$(date +%s)
timeout 45 python -m lab bench train --preset small --max-steps 150 --timeout 40 --mixers falcon-1.3 \
  --out $W/train --work /tmp/runs > $W/train/console.log 2>&1 || echo "bench train exited $?"
grep "^|" $W/train/train.md | cut -d'|' -f2-8
timeout --signal=INT --kill-after=20 $(( 520 - ($(date +%s) - t0) )) \
  python -m lab reproduce addition --seeds 1 --per-gpu 8 \
  --rows transformer,retnet,mamba2,falcon-1a.1,falcon-1a.2,falcon-1a.3,falcon-3a.3,falcon-1.3 \
  > $W/reproduce_console.log 2>&1 || echo "reproduce exited $?"
echo "reproduce stopped at $(( $(date +%s) - t0 )) s"
pack
cat $W/reproduce_console.log | tail -20
cat results/addition/table.md 2>/dev/null | grep "^|" | head -20
