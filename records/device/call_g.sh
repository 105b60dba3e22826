#!/usr/bin/env bash
# One device call: the rules study (falcon_lab/sweeps/rules.yaml) on one H200, eight trials sharing it, at a short
# protocol (500 steps, per-token validation accuracy as the objective, Hyperband's first rung at 200 steps,
# or PRUNE_AFTER),
# until the call's time is spent; the journal comes back so the study resumes. optuna and its dependencies
# are carried as wheels (.whl/). Run from the repository root with LAB_COMMIT set; writes $OUT/out.tgz.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl/*.whl && export PYTHONPATH=/tmp/site
t0=$(date +%s)
timeout --signal=INT --kill-after=20 ${SWEEP_S:-410} python -m lab sweep run rules --trials 40 --workers 8 \
  --objective val_token_acc --prune-after ${PRUNE_AFTER:-200} --seed 0 \
  --set train.max_steps=500 --set eval.free_per_length=0 > /tmp/sweep_console.log 2>&1 || echo "sweep exited $?"
echo "sweep stopped at $(( $(date +%s) - t0 )) s"
cp /tmp/sweep_console.log results/sweeps/rules/console.log 2>/dev/null
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C results sweeps runs lab.db
tail -15 /tmp/sweep_console.log
