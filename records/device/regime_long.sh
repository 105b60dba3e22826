#!/usr/bin/env bash
# Device call: the steps axis. One compiled, graphed run at a time on one H200 (sharing the GPU time-slices it):
# falcon-1a.3 then falcon-1.3 at the paper-size model in the packed curriculum (batch 256 of 256 positions,
# 65k tokens a step), lr 3e-3, 5000 steps with the ramp over the first 1000 (4000 steps at widths 1-32), seed 0;
# then a short eager check of isolated samples for falcon-1a.3 through the rule's cu_seqlens (its step time).
# `bash regime_long.sh abacus` (second call): the same two runs with digit positions (model.abacus=32), no
# isolated check. `bash regime_long.sh chunk` (third call): falcon-1.3 over 2400 steps trained with the rule's
# chunks of 64 and of 32 tokens, then `chunk_probe.py` on both runs' best weights (the rule computed other ways).
# `bash regime_long.sh graphs`: the fused kernels' and the graphed step's GPU tests, then `graph_check.py` (one
# step's gradient eager, compiled, graphed, against the rule token by token): about 9 minutes at most.
# `bash regime_long.sh nograph`: falcon-1.3 at chunks of 32 and of 64 as in the chunk call, compiled without CUDA
# graphs (do the walls at widths 8 and 19 stay?).
# `bash regime_long.sh precision`: graph_check for falcon-1.3 at chunks of 32 (with the fp32-fed row), then three
# falcon-1.3 runs at chunks of 32 at once, compiled without graphs: the fused kernels fed bf16 (as before), fed
# float32 (`rule_dtype=float32`), and the PyTorch chunk form. `bash regime_long.sh seeds`: the bf16- and fp32-fed
# runs again at seeds 1 and 2, four at once.
# `bash regime_long.sh size`: the model-size axis, never tried before: falcon-1.3 at the paper's LM shape (12 layers
# of d_model 768, 12 heads of 64; about 85M parameters against addition-paper's 10M) in the packed preset's schedule
# (2000 steps, ramp over 1500, lr 1e-3, warm-up 200), compiled and graphed, alone on the GPU for RUN_S seconds;
# WIDTH, DEPTH, SEED, SIZE_STEPS, SIZE_RAMP (the curriculum's ramp, default 3/4 of the steps), SIZE_LR, SIZE_MIXER
# and SIZE_VAL (evaluate every N steps, default 100) set another shape, seed, length, ramp, rate, mixer or evaluation
# interval, SIZE_ABACUS=K digit positions (`model.abacus=K`, as the abacus call at 11.6M; the run's name gains
# -abK) and SIZE_ISOLATE=1 isolated samples (`model.isolate_samples=true`, the state restarted at every sample of a
# packed row; name -iso): the transformer's extrapolating recipe is both, without RoPE. A whole 2000-step run at 12 x 768 evaluated every 100 steps takes about 540 s and missed its last
# evaluation at RUN_S=545: use SIZE_VAL=200.
# Run from the repository root with LAB_COMMIT set; writes $OUT/long.tgz and prints a table.
set -u
VARIANT=${1:-plain}
export PYTHONUNBUFFERED=1
[ "$VARIANT" = plain ] && export OMP_NUM_THREADS=4
W=/tmp/long; mkdir -p $W/runs
STEPS=${STEPS:-5000}; RUN_S=${RUN_S:-235}; ISO_S=${ISO_S:-70}; KILL_S=${KILL_S:-20}
BASE="--task addition --preset addition-paper --set data.curriculum=linear --set data.start_width=1
  --set data.packing=true --set data.seq_len=256 --set train.ckpt_every=100000 --set eval.n_per_length=50
  --set eval.free_per_length=0 --set optim.lr=3e-3 --no-progress"
one() {  # name seconds mixer settings...
  local name=$1 secs=$2 mixer=$3; shift 3
  local t0=$(date +%s)
  timeout --signal=INT --kill-after=$KILL_S $secs python -m lab train $BASE --seed ${SEED:-0} --mixer $mixer "$@" \
    --out $W/runs/$name --results $W/res_$name > $W/$name.log 2>&1
  echo "$name rc=$? wall_s=$(( $(date +%s) - t0 ))" | tee -a $W/times.txt
}
FAST="--max-steps $STEPS --set data.ramp_steps=1000 --set train.val_every=250 --set train.compile=true --set train.cuda_graphs=true"
if [ "$VARIANT" = graphs ]; then
  # the fused kernels moved to falcon_lab/kernels/{common,regression,inner_product,window}: their GPU tests first
  timeout 240 python -m pytest -q -x -m gpu tests/test_triton_regression.py tests/test_triton_inner_product.py \
    tests/test_train.py -k "not follows_the_eager_loss_curve" 2>&1 | tail -15 | tee "$OUT/gpu_tests.txt"
  timeout 300 python records/device/graph_check.py --mixers falcon-1.3,falcon-1a.3,deltanet --chunk 32 --batch 32 \
    2>&1 | tee "$OUT/graph_check.txt"
  NAMES=""
elif [ "$VARIANT" = precision ]; then
  # does the wall at width 8 (chunks of 32) come from the fused kernels' bf16 operands? graph_check with the
  # fp32-fed row, then three runs at once, compiled without graphs: bf16-fed kernels (as every run so far),
  # fp32-fed kernels (rule_dtype), and the PyTorch chunk form (fp32 throughout)
  timeout 120 python records/device/graph_check.py --mixers falcon-1.3 --chunk 32 --batch 32 2>&1 \
    | grep -v Warning | tee "$OUT/graph_check.txt"
  NAMES="f13-c32-bf16 f13-c32-fp32 f13-c32-torch"
  FAST="--max-steps 2400 --set data.ramp_steps=1000 --set train.val_every=200 --set train.compile=true
    --set model.mixer_options.chunk_size=32"
  one f13-c32-bf16 $RUN_S falcon-1.3 $FAST &
  one f13-c32-fp32 $RUN_S falcon-1.3 $FAST --set model.mixer_options.rule_dtype=float32 &
  one f13-c32-torch $RUN_S falcon-1.3 $FAST --set model.mixer_options.backend=chunk &
  wait
elif [ "$VARIANT" = seeds ]; then
  # the precision call's bf16- and fp32-fed runs again at seeds 1 and 2, four at once (is the wall at width 8 the
  # fp32 rule's, or a seed's?)
  NAMES="f13-c32-bf16-s1 f13-c32-fp32-s1 f13-c32-bf16-s2 f13-c32-fp32-s2"
  FAST="--max-steps 2400 --set data.ramp_steps=1000 --set train.val_every=200 --set train.compile=true
    --set model.mixer_options.chunk_size=32"
  for s in 1 2; do
    SEED=$s one f13-c32-bf16-s$s $RUN_S falcon-1.3 $FAST &
    SEED=$s one f13-c32-fp32-s$s $RUN_S falcon-1.3 $FAST --set model.mixer_options.rule_dtype=float32 &
  done
  wait
elif [ "$VARIANT" = nograph ]; then
  NAMES="f13-c32-nograph f13-c64-nograph"
  FAST="--max-steps 2400 --set data.ramp_steps=1000 --set train.val_every=200 --set train.compile=true"
  one f13-c32-nograph $RUN_S falcon-1.3 $FAST --set model.mixer_options.chunk_size=32
  one f13-c64-nograph $RUN_S falcon-1.3 $FAST
elif [ "$VARIANT" = chunk ]; then
  NAMES="f13-c64 f13-c32"
  FAST="--max-steps 2400 --set data.ramp_steps=1000 --set train.val_every=200 --set train.compile=true --set train.cuda_graphs=true"
  one f13-c64 $RUN_S falcon-1.3 $FAST
  one f13-c32 $RUN_S falcon-1.3 $FAST --set model.mixer_options.chunk_size=32
elif [ "$VARIANT" = size ]; then
  # WIDTH x DEPTH (default 768 x 12; heads of 64), SEED (default 0), SIZE_STEPS (default 2000, ramp over 3/4)
  WIDTH=${WIDTH:-768}; DEPTH=${DEPTH:-12}; SIZE_STEPS=${SIZE_STEPS:-2000}
  MIXER=${SIZE_MIXER:-falcon-1.3}; RAMP=${SIZE_RAMP:-$(( SIZE_STEPS * 3 / 4 ))}
  NAME=$(echo $MIXER | sed 's/falcon-/f/; s/\.//')-${WIDTH}x${DEPTH}; [ -n "${SIZE_RAMP:-}" ] && NAME=$NAME-ramp$RAMP; [ "${SEED:-0}" != 0 ] && NAME=$NAME-s$SEED; [ -n "${SIZE_LR:-}" ] && NAME=$NAME-lr$SIZE_LR; [ "$SIZE_STEPS" != 2000 ] && NAME=$NAME-$SIZE_STEPS
  EXTRA=(); [ -n "${SIZE_ABACUS:-}" ] && { EXTRA=(--set model.abacus=$SIZE_ABACUS); NAME=$NAME-ab$SIZE_ABACUS; }
  # isolated samples reach the rule as cu_seqlens, one per sample of the step: no static shape to graph
  [ "${SIZE_ISOLATE:-0}" = 1 ] && { EXTRA+=(--set model.isolate_samples=true --set train.cuda_graphs=false); NAME=$NAME-iso; }
  NAMES="$NAME"
  one $NAME $RUN_S $MIXER --max-steps $SIZE_STEPS --set data.ramp_steps=$RAMP \
    --set train.val_every=${SIZE_VAL:-100} --set train.compile=true --set train.cuda_graphs=true \
    --set optim.lr=${SIZE_LR:-1e-3} --set optim.warmup_steps=200 --set model.d_model=$WIDTH --set model.n_layers=$DEPTH \
    --set model.n_heads=$(( WIDTH / 64 )) "${EXTRA[@]}"
elif [ "$VARIANT" = abacus ]; then
  NAMES="f1a3-ab-long f13-ab-long"
  one f1a3-ab-long $RUN_S falcon-1a.3 $FAST --set model.abacus=32
  one f13-ab-long $RUN_S falcon-1.3 $FAST --set model.abacus=32
else
  NAMES="f1a3-long f13-long f1a3-iso"
  one f1a3-long $RUN_S falcon-1a.3 $FAST
  one f13-long $RUN_S falcon-1.3 $FAST
  one f1a3-iso $ISO_S falcon-1a.3 --max-steps 300 --set data.ramp_steps=1000 --set train.val_every=100 \
    --set model.isolate_samples=true
fi
# where each run's transitions went (records/device/census.py): at the failure for a run that stopped on a non-finite
# loss (its weights do not travel back), else at its best step
for name in $NAMES; do
  wts=best; [ -f $W/runs/$name/checkpoints/failed.pt ] && wts=failed
  [ -f $W/runs/$name/checkpoints/$wts.pt ] && timeout 60 python records/device/census.py $W/runs/$name \
    --which $wts 2>&1 | tail -1 | tee -a $W/census.txt
done
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
export NAMES
tar czf "$OUT/long.tgz" --exclude='checkpoints' --exclude='*.pt' --exclude='*.lock' -C $W .
python - <<'PY'
import csv, os
W = "/tmp/long/runs"
def rows(name, f):
    p = os.path.join(W, name, f)
    return list(csv.DictReader(open(p))) if os.path.exists(p) else []
for name in os.environ["NAMES"].split():
    ev = rows(name, "evals.csv")
    print(f"{name}: " + "  ".join(f"{r['step']}:{float(r['val_acc']):.1f}/{float(r['val_token_acc']):.1f}" for r in ev))
    if ev:
        print("  last, per width 1-40: " + " ".join(f"{float(ev[-1][f'tf@{w}']):.0f}" for w in range(1, 41)))
    m = [r for r in rows(name, "metrics.csv") if r.get("elapsed_s")]
    if len(m) > 2:
        print(f"  last logged step {m[-1]['step']} at {float(m[-1]['elapsed_s']):.0f} s")
PY
cat $W/times.txt
if [ "$VARIANT" = chunk ]; then
  python records/device/chunk_probe.py $W/runs/f13-c64 $W/runs/f13-c32 --widths 14-24 2>&1 | tee "$OUT/probe.txt"
fi
