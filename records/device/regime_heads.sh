#!/usr/bin/env bash
# Device call: the rule's key width per head (the fast-weight state's size), an axis no addition run had moved.
# A head of key width D holds at most D independent key-value pairs; a width-n sum reads 2n operand digits, so a
# 64-wide head (every run so far) is full near n = 32 and a wall before it is what a crowded state looks like.
# The packed preset's schedule (6 x 384, 2000 steps, ramp over 1500, lr 1e-3, batch 256 x 256 positions, seed 0),
# compiled and graphed, with the mixer's heads changed: RUNS lists "name mixer n_heads head_dim [d_model n_layers]"
# (head_dim "-" for d_model / n_heads; the shape defaults to the preset's 384 x 6), PAIR runs share the GPU at once
# (default 2), each stopped after RUN_S seconds. Its first call (4 runs, RUN_S=270) ran past the device's 590 s
# before the tar; the logs were fetched from the warm machine: leave 60 s for the census and the tar.
# Run from the repository root with LAB_COMMIT set; writes $OUT/heads.tgz and prints a table.
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
W=/tmp/heads; mkdir -p $W/runs
RUN_S=${RUN_S:-260}; KILL_S=${KILL_S:-10}; PAIR=${PAIR:-2}; STEPS=${STEPS:-2000}
RUNS=${RUNS:-"f13-h3x128 falcon-1.3 3 -;f13-h2x256 falcon-1.3 2 256;f13-h12x32 falcon-1.3 12 -;f1a3-h3x128 falcon-1a.3 3 -"}
BASE="--task addition --preset addition-paper --set data.curriculum=linear --set data.start_width=1
  --set data.ramp_steps=$(( STEPS * 3 / 4 )) --set data.packing=true --set data.seq_len=256 --max-steps $STEPS
  --set train.ckpt_every=100000 --set train.val_every=${VAL:-200} --set eval.n_per_length=50 --set eval.free_per_length=0
  --set train.compile=true --set train.cuda_graphs=true --seed ${SEED:-0} --no-progress"
one() {  # name mixer n_heads head_dim [d_model n_layers]
  local name=$1 mixer=$2 heads=$3 hd=$4 t0=$(date +%s) extra=()
  [ "$hd" != - ] && extra=(--set model.mixer_options.head_dim=$hd)
  [ $# -ge 6 ] && extra+=(--set model.d_model=$5 --set model.n_layers=$6)
  timeout --signal=INT --kill-after=$KILL_S $RUN_S python -m lab train $BASE --mixer $mixer \
    --set model.n_heads=$heads "${extra[@]}" --out $W/runs/$name --results $W/res_$name > $W/$name.log 2>&1
  echo "$name rc=$? wall_s=$(( $(date +%s) - t0 ))" | tee -a $W/times.txt
}
NAMES=""; n=0
IFS=';' read -ra SPECS <<< "$RUNS"
for spec in "${SPECS[@]}"; do
  set -- $spec; NAMES="$NAMES $1"
  one "$@" &
  n=$(( n + 1 )); [ $(( n % PAIR )) = 0 ] && wait
done
wait
for name in $NAMES; do
  [ -f $W/runs/$name/checkpoints/best.pt ] && timeout 30 python records/device/census.py $W/runs/$name \
    --which best 2>&1 | tail -1 | tee -a $W/census.txt
done
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
export NAMES
nvidia-smi --query-gpu=name --format=csv,noheader > $OUT/gpu.txt
tar czf "$OUT/heads.tgz" --exclude='checkpoints' --exclude='*.pt' --exclude='*.lock' -C $W .
python - <<'PY'
import csv, os
W = "/tmp/heads/runs"
def rows(name, f):
    p = os.path.join(W, name, f)
    return list(csv.DictReader(open(p))) if os.path.exists(p) else []
for name in os.environ["NAMES"].split():
    ev = rows(name, "evals.csv")
    print(f"{name}: " + "  ".join(f"{r['step']}:{float(r['val_acc']):.1f}/{float(r['val_token_acc']):.1f}" for r in ev))
    if ev:
        print("  last, per width 1-40: " + " ".join(f"{float(ev[-1][f'tf@{w}']):.0f}" for w in range(1, 41)))
        print(f"  last ood_mean {float(ev[-1]['ood_mean']):.1f} ood_token_mean {float(ev[-1]['ood_token_mean']):.1f}")
    m = [r for r in rows(name, "metrics.csv") if r.get("elapsed_s")]
    if len(m) > 2:
        print(f"  last logged step {m[-1]['step']} at {float(m[-1]['elapsed_s']):.0f} s")
PY
cat $W/times.txt
for f in $W/*.log; do grep -l -i -E "Traceback|error" $f >/dev/null && { echo "== $f"; grep -i -E "error" $f | tail -3; }; done
