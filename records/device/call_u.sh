#!/usr/bin/env bash
# One device call on two H200s: Falcon-2 over the longer schedule (4000 steps, widths ramped over 3000: the
# settings of records/addition/packed-4000) as ONE run on both GPUs (DDP, NCCL, 128 rows of the 256 each:
# the same data and run id as on one GPU), and the mixers' Triton test on a GPU.
# If the DDP run fails at once, GPU 0 trains falcon-1.3's next seed of packed-4000 instead.
# Run from the repository root with BUDGET_S set; writes $OUT/out.tgz (no weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out_u; mkdir -p $W
t0=$(date +%s)
left() { local l=$(( ${BUDGET_S:-540} - ($(date +%s) - t0) )); echo $(( l > 1 ? l : 1 )); }
CUDA_VISIBLE_DEVICES=0 timeout 120 python -m pytest -q tests/test_mixers_triton.py > $W/test_mixers_triton.log 2>&1
echo "mixers triton GPU test exited $? ($(tail -n 1 $W/test_mixers_triton.log))"
timeout --signal=INT --kill-after=40 $(left) python -m lab train --preset addition-paper --mixer falcon-2 --seed 0 \
  --max-steps 4000 --devices 2 --no-progress --set data.curriculum=linear --set data.start_width=1 \
  --set data.ramp_steps=3000 --set data.packing=true --set data.seq_len=256 --set train.compile=true \
  > $W/console_falcon2_ddp.log 2>&1
rc=$?; echo "falcon-2 DDP run exited $rc at $(( $(date +%s) - t0 )) s"
if [ $rc != 0 ] && [ $(( $(date +%s) - t0 )) -lt 150 ]; then
  CUDA_VISIBLE_DEVICES=0 timeout --signal=INT --kill-after=40 $(left) python -m lab reproduce addition \
    --preset packed --gpus 1 --seeds 6 --rows falcon-1.3 --set train.compile=true --max-steps 4000 \
    --set data.ramp_steps=3000 --out results/addition/packed-4000 > $W/console_C.log 2>&1
  echo "fallback campaign C exited $? at $(( $(date +%s) - t0 )) s"
fi
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
  -C "$PWD/results" runs lab.db addition
grep -v "^step\|Warning\|warn" $W/console_falcon2_ddp.log | tail -n 8
