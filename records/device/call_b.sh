#!/usr/bin/env bash
# One device call: the four mixers call A's limit left out of `lab bench train`, then the training-regime
# sweep (transformer, per-token objective, 8 workers sharing the GPU) until the call's time is spent.
# Run from the repository root with LAB_COMMIT set; .whl carried (optuna and its needs).
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  && export PYTHONPATH=/tmp/site || exit 1
W=/tmp/out; mkdir -p $W/train
pack() { tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
         -C "$PWD/results" sweeps ; }
t0=$(date +%s)
timeout 110 python -m lab bench train --preset small --max-steps 150 --timeout 35 \
  --mixers falcon-1a.2,falcon-1a.3,falcon-3a.3,falcon-1.3 \
  --out $W/train --work /tmp/runs > $W/train/console.log 2>&1 || echo "bench train exited $?"
echo "bench train done at $(( $(date +%s) - t0 )) s"; grep "^|" $W/train/train.md | cut -d'|' -f2-8
timeout --signal=TERM --kill-after=25 $(( 545 - ($(date +%s) - t0) )) \
  python -m lab sweep run regime --mixer transformer --objective val_token_acc --trials 40 --workers 8 \
  --seed 0 > $W/sweep_console.log 2>&1 || echo "sweep exited $?"
echo "sweep stopped at $(( $(date +%s) - t0 )) s"
pack
tail -40 $W/sweep_console.log
