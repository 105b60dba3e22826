#!/usr/bin/env bash
# Device calls planned for the next session on two H200s, run back to back on one warm machine (the first with
# `carry` of results/runs and results/lab.db, the later ones without):
#   D: the long schedule's last seeds (records/addition/packed-4000: Falcon-2's and Gated DeltaNet's seed 2; the
#      finished seeds 0-1 are skipped), one run a GPU, about 10-11 minutes each: calls 1 and 2.
#   E: Falcon-2's seed 0 over 8000 steps, the ramp over 6000 (records/addition/packed-8000), one run over both
#      GPUs (DDP, about 13 minutes): begins when D is done (call 2) and ends in call 3.
# Each stage stops with a checkpoint (SIGINT) when the call's time is up and resumes in the next call.
# CHECKS=1 (first call): the GPU tests of the regression kernels first (their first chunk is found by a jit helper
# since commit 894e7f9, not yet compiled on a GPU); the campaigns run only if they pass.
# SKIP_D=1 / SKIP_E=1 leave a stage out. Run from the repository root with BUDGET_S set; writes $OUT/out.tgz
# (no weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out_w; mkdir -p $W
t0=$(date +%s); stamp=$(date -u +%H%M%S)
left() { local l=$(( ${BUDGET_S:-540} - ($(date +%s) - t0) )); echo $(( l > 1 ? l : 1 )); }
if [ "${CHECKS:-0}" = 1 ]; then
  timeout 300 python -m pytest -q -x -p no:cacheprovider tests/test_triton_regression.py -k "gpu_sizes or packed_sequences" > $W/checks.log 2>&1
  rc=$?; echo "regression kernel GPU tests exited $rc: $(tail -n 1 $W/checks.log)"
  if [ $rc != 0 ]; then SKIP_D=1; SKIP_E=1; tail -n 30 $W/checks.log; fi
fi
if [ "${SKIP_D:-0}" != 1 ]; then
  timeout --signal=INT --kill-after=50 $(left) python -m lab reproduce addition --preset packed --gpus 2 \
    --seeds 3 --rows falcon-2,gated-deltanet --set train.compile=true --max-steps 4000 \
    --set data.ramp_steps=3000 --out results/addition/packed-4000 > $W/console_D_$stamp.log 2>&1
  echo "campaign D stopped: exit $? at $(( $(date +%s) - t0 )) s"
fi
if [ "${SKIP_E:-0}" != 1 ] && [ "$(left)" -gt 90 ]; then
  timeout --signal=INT --kill-after=50 $(left) python -m lab reproduce addition --preset packed --gpus 1 \
    --gpus-per-run 2 --seeds 1 --rows falcon-2 --set train.compile=true --max-steps 8000 \
    --set data.ramp_steps=6000 --out results/addition/packed-8000 > $W/console_E_$stamp.log 2>&1
  echo "campaign E stopped: exit $? at $(( $(date +%s) - t0 )) s"
fi
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
  -C "$PWD/results" addition runs lab.db
for f in $W/console_[DE]_$stamp.log; do [ -f "$f" ] && grep -v "^step\|Warning\|warn" "$f" | tail -n 6; done
exit 0
