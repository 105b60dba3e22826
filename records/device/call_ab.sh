#!/usr/bin/env bash
# The device calls that followed call_aa.sh on the same warm machine (two H200s, 2026-11-30), each as it ran,
# picked with CALL=2..6. Call 1 was call_aa.sh, whose offset evaluations failed on an import (it now sets
# PYTHONPATH); call 2 ran them. The results/runs folder of call_aa.sh's campaign stayed on the machine, so
# call 6 (seeds 0-8 planned) trained only seeds 6-8. Call 5's GPU 0 command named a `--only-seeds` option that
# does not exist and did nothing; call 6 ran its runs. Writes $OUT/out.tgz (no weights).
set -u
export PYTHONUNBUFFERED=1
C="python -m lab reproduce addition --preset packed --rows transformer --set train.compile=true --set model.isolate_samples=true"
W=/tmp/out_$CALL; mkdir -p $W
case $CALL in
2)  # Offsets 0, 8, 16 for the six runs of call_aa.sh, three per GPU.
    runs=$(grep -l "isolate_samples: true" results/runs/*/config.yaml | xargs -n1 dirname | sort); set -- $runs
    PYTHONPATH=. CUDA_VISIBLE_DEVICES=0 python records/device/offset_evals.py $W/offsets_0 0,8,16 $1 $2 $3 > $W/off0.log 2>&1 &
    PYTHONPATH=. CUDA_VISIBLE_DEVICES=1 python records/device/offset_evals.py $W/offsets_1 0,8,16 $4 $5 $6 > $W/off1.log 2>&1 &
    wait;;
3)  # GPU 0: digit positions at the preset's 2000 steps; GPU 1: isolated samples alone (NoPE), 4000 steps.
    CUDA_VISIBLE_DEVICES=0 timeout --signal=INT --kill-after=40 480 $C --gpus 1 --per-gpu 3 --seeds 3 \
      --set model.abacus=32 --set model.mixer_options.rope=false \
      --out results/addition/packed-abacus-isolated-2000 > $W/console_B.log 2>&1 &
    CUDA_VISIBLE_DEVICES=1 timeout --signal=INT --kill-after=40 480 $C --gpus 1 --per-gpu 3 --seeds 3 \
      --max-steps 4000 --set data.ramp_steps=3000 --set model.mixer_options.rope=false \
      --out results/addition/packed-isolated-nope > $W/console_C.log 2>&1 &
    wait;;
4)  # GPU 0: isolated samples with RoPE, then without (NoPE), 2000 steps; GPU 1: digit positions over 6000 steps.
    (CUDA_VISIBLE_DEVICES=0 timeout --signal=INT --kill-after=30 500 $C --gpus 1 --per-gpu 3 --seeds 3 \
       --out results/addition/packed-isolated-rope > $W/console_D.log 2>&1
     CUDA_VISIBLE_DEVICES=0 timeout --signal=INT --kill-after=30 300 $C --gpus 1 --per-gpu 3 --seeds 3 \
       --set model.mixer_options.rope=false --out results/addition/packed-isolated-nope-2000 > $W/console_E.log 2>&1) &
    CUDA_VISIBLE_DEVICES=1 timeout --signal=INT --kill-after=30 520 $C --gpus 1 --per-gpu 2 --seeds 2 \
      --set model.abacus=32 --set model.mixer_options.rope=false --max-steps 6000 --set data.ramp_steps=3000 \
      --out results/addition/packed-abacus-isolated-6000 > $W/console_F.log 2>&1 &
    wait;;
5)  # GPU 1: offsets up to 64 (model.abacus=64), 4000 steps. (GPU 0's command failed at once: --only-seeds.)
    CUDA_VISIBLE_DEVICES=1 timeout --signal=INT --kill-after=30 500 $C --gpus 1 --per-gpu 3 --seeds 3 \
      --set model.mixer_options.rope=false --max-steps 4000 --set data.ramp_steps=3000 --set model.abacus=64 \
      --out results/addition/packed-abacus64-isolated > $W/console_H.log 2>&1;;
6)  # Seeds 6-8 of call_aa.sh's configuration (0-5 finished and skipped), over both GPUs.
    timeout --signal=INT --kill-after=15 275 $C --gpus 2 --per-gpu 2 --set model.mixer_options.rope=false \
      --max-steps 4000 --set data.ramp_steps=3000 --seeds 9 --set model.abacus=32 \
      --out results/addition/packed-abacus-isolated > $W/console_G.log 2>&1;;
esac
tar czf $OUT/out.tgz --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . -C "$PWD/results" addition runs lab.db
grep -h "finished in\|table:" $W/console_*.log 2>/dev/null | tail -n 12
exit 0
