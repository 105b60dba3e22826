#!/usr/bin/env bash
# Device call: a list of addition runs in the packed preset's schedule (6 x 384, 2000 steps, ramp over 1500, lr 1e-3,
# batch 256 x 256 positions, 50 samples a width, evaluated every VAL=200 steps), compiled and graphed, one after the
# other (a compiled falcon-1.3 run fills the GPU: 1.15M tokens a second alone, 0.62M beside a DeltaNet run at 0.56M;
# sharing pays only where a run is slow, records/addition/packed-exact/README.md). RUNS lists "name mixer seed [@seconds]
# [lab train options...]" separated by ';' (@seconds: this run's own limit in place of RUN_S, e.g. @330 for Gated
# DeltaNet, whose PyTorch chunk form trains at 0.46M tokens a second). A run starts only while CALL_S (the call's own
# limit, default 560 s) leaves its limit for it, and $OUT/runs.tgz is rewritten after every run, so a call cut short
# still brings back what finished. PARALLEL=1 starts every run at once, sharing the GPU, each under its own limit.
# runs.tgz is also rewritten every SNAP_S seconds (default 60), so a call killed at its limit (the device time left,
# when that is less than the call's timeout) still brings back the runs as they were a minute before.
# Run from the repository root with LAB_COMMIT set; prints a table.
#   RUNS="f13-ab0-s0 falcon-1.3 0 --set model.abacus=0;f13-ab0-s1 falcon-1.3 1 --set model.abacus=0" \
#     bash records/device/regime_runs.sh
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
W=/tmp/runs; mkdir -p $W/runs
T0=$(date +%s); CALL_S=${CALL_S:-560}; RUN_S=${RUN_S:-150}; KILL_S=${KILL_S:-10}; STEPS=${STEPS:-2000}
BASE="--task addition --preset addition-paper --set data.curriculum=linear --set data.start_width=1
  --set data.ramp_steps=$(( STEPS * 3 / 4 )) --set data.packing=true --set data.seq_len=256 --max-steps $STEPS
  --set train.ckpt_every=100000 --set train.val_every=${VAL:-200} --set eval.n_per_length=50 --set eval.free_per_length=0
  --set train.compile=true --set train.cuda_graphs=${GRAPHS:-true} --no-progress"
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
pack() {  # the run folders (no weights) and logs, written whole or not at all
  tar czf "$OUT/.runs.tgz.part" --exclude='checkpoints' --exclude='*.pt' --exclude='*.lock' --exclude='res_*' -C $W . \
    2>/dev/null && mv -f "$OUT/.runs.tgz.part" "$OUT/runs.tgz"
}
( while sleep ${SNAP_S:-60}; do pack; done ) &
snapper=$!
one() {  # name mixer seed limit [options...]: one run, timed
  local name=$1 mixer=$2 seed=$3 limit=$4 t0=$(date +%s); shift 4
  timeout --signal=INT --kill-after=$KILL_S $limit python -m lab train $BASE --mixer $mixer --seed $seed "$@" \
    --out $W/runs/$name --results $W/res_$name > $W/$name.log 2>&1
  echo "$name rc=$? wall_s=$(( $(date +%s) - t0 ))" | tee -a $W/times.txt
}
NAMES=""
IFS=';' read -ra SPECS <<< "$RUNS"
for spec in "${SPECS[@]}"; do
  set -- $spec; name=$1 mixer=$2 seed=$3; shift 3
  limit=$RUN_S; case "${1:-}" in @*) limit=${1#@}; shift;; esac
  left=$(( CALL_S - ($(date +%s) - T0) - 30 ))
  [ $left -lt $limit ] && { echo "$name not started: $left s left" | tee -a $W/times.txt; continue; }
  NAMES="$NAMES $name"
  if [ -n "${PARALLEL:-}" ]; then
    one $name $mixer $seed $limit "$@" &
    PIDS="${PIDS:-} $!"
  else
    one $name $mixer $seed $limit "$@"
    pack
  fi
done
for pid in ${PIDS:-}; do wait $pid; done  # the runs (a bare `wait` would wait for the snapshots' loop too)
kill $snapper 2>/dev/null; wait $snapper 2>/dev/null
pack
export NAMES
python - <<'PY'
import csv, os
W = "/tmp/runs/runs"
for name in os.environ["NAMES"].split():
    p = os.path.join(W, name, "evals.csv")
    ev = list(csv.DictReader(open(p))) if os.path.exists(p) else []
    print(f"{name}: " + "  ".join(f"{r['step']}:{float(r['val_acc']):.1f}" for r in ev))
    if ev:
        print("  last, per width 1-40: " + " ".join(f"{float(ev[-1][f'tf@{w}']):.0f}" for w in range(1, 41)))
        print(f"  last ood_mean {float(ev[-1]['ood_mean']):.1f} ood_token_mean {float(ev[-1]['ood_token_mean']):.1f}")
PY
cat $W/times.txt
