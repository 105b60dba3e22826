#!/usr/bin/env bash
# Device call on two H200s: the transformer without RoPE with digit positions (`model.abacus=32`) and isolated
# samples (`model.isolate_samples=true`: attention within each packed sample, a digit-position offset per sample)
# over the long schedule (4000 steps, ramp over 3000), seeds 0-5, three runs per GPU
# (records/addition/packed-abacus-isolated). Then every finished run's best and last weights evaluated at the
# digit-position offsets 0, 8 and 16 (records/device/offset_evals.py). Run from the repository root with LAB_COMMIT
# (40 hex digits) and BUDGET_S set; writes $OUT/out.tgz (no weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out_x; mkdir -p $W
t0=$(date +%s); stamp=$(date -u +%H%M%S)
left() { local l=$(( ${BUDGET_S:-540} - ($(date +%s) - t0) )); echo $(( l > 1 ? l : 1 )); }
TRAIN_S=${TRAIN_S:-450}
timeout --signal=INT --kill-after=40 $TRAIN_S python -m lab reproduce addition --preset packed --gpus 2 --per-gpu 3 \
  --seeds 6 --rows transformer --set train.compile=true --set model.abacus=32 --max-steps 4000 \
  --set data.ramp_steps=3000 --set model.mixer_options.rope=false --set model.isolate_samples=true \
  --out results/addition/packed-abacus-isolated > $W/console_A_$stamp.log 2>&1
echo "campaign stopped at $(( $(date +%s) - t0 )) s"
runs=$(grep -l "isolate_samples: true" results/runs/*/config.yaml 2>/dev/null | xargs -r -n1 dirname | sort)
set -- $runs
half=$(( ($# + 1) / 2 ))
first=$(echo $runs | tr ' ' '\n' | head -n $half); second=$(echo $runs | tr ' ' '\n' | tail -n +$(( half + 1 )))
[ -n "$first" ] && PYTHONPATH=. CUDA_VISIBLE_DEVICES=0 timeout $(left) python records/device/offset_evals.py $W/offsets_0 0,8,16 $first \
  > $W/offsets_0_$stamp.log 2>&1 &
[ -n "$second" ] && PYTHONPATH=. CUDA_VISIBLE_DEVICES=1 timeout $(left) python records/device/offset_evals.py $W/offsets_1 0,8,16 $second \
  > $W/offsets_1_$stamp.log 2>&1 &
wait
echo "offset evaluations stopped at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
  -C "$PWD/results" addition runs lab.db
grep -v "^step\|Warning\|warn" $W/console_A_$stamp.log | tail -n 8
grep -h "offset" $W/offsets_*_$stamp.log | sort
exit 0
