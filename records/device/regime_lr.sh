#!/usr/bin/env bash
# Device call: (1) the learning rate of falcon-1.3 at the paper-size model in the packed curriculum (batch 256 of
# 256 positions, 1500 steps, ramp over 1000, compiled and replayed from CUDA graphs), lr 1e-3 / 3e-3 / 1e-2, one
# seed; (2) train.deterministic=true on the GPU: the transformer, falcon-1a.3 and falcon-1.3 (300 steps of the
# same regime, eager) each trained twice, their metrics compared. Everything at once on one H200. Run from the
# repository root; writes $OUT/lr.tgz and prints a table.
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
W=/tmp/lr; mkdir -p $W/runs
RUN_S=${RUN_S:-400}
BASE="--task addition --preset addition-paper --seed 0 --set data.curriculum=linear --set data.start_width=1
  --set data.packing=true --set data.seq_len=256 --set train.ckpt_every=100000 --set eval.n_per_length=50
  --set eval.free_per_length=0"
launch() {  # name mixer settings...
  local name=$1 mixer=$2; shift 2
  timeout --signal=INT --kill-after=30 $RUN_S python -m lab train $BASE --mixer $mixer "$@" \
    --out $W/runs/$name --results $W/reg_$name > $W/$name.log 2>&1 &
}
FAST="--max-steps 1500 --set data.ramp_steps=1000 --set train.val_every=250 --set train.compile=true --set train.cuda_graphs=true"
for lr in 1e-3 3e-3 1e-2; do launch f13-lr$lr falcon-1.3 $FAST --set optim.lr=$lr; done
DET="--max-steps 300 --set data.ramp_steps=1000 --set train.val_every=150 --set train.deterministic=true"
for m in transformer falcon-1a.3 falcon-1.3; do
  for rep in a b; do launch det-$m-$rep $m $DET; done
done
wait
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
tar czf "$OUT/lr.tgz" --exclude='checkpoints' --exclude='*.pt' --exclude='*.lock' -C $W .
python - <<'PY'
import csv, os
W = "/tmp/lr/runs"
def rows(name, f):
    p = os.path.join(W, name, f)
    return list(csv.DictReader(open(p))) if os.path.exists(p) else []
for lr in ("1e-3", "3e-3", "1e-2"):
    ev = rows(f"f13-lr{lr}", "evals.csv")
    print(f"falcon-1.3 lr {lr}: " + "  ".join(f"{r['step']}:{float(r['val_acc']):.1f}/{float(r['val_token_acc']):.1f}" for r in ev))
for m in ("transformer", "falcon-1a.3", "falcon-1.3"):
    a, b = rows(f"det-{m}-a", "metrics.csv"), rows(f"det-{m}-b", "metrics.csv")
    key = lambda r: (r["step"], r["loss"], r["grad_norm"], r["val_loss"])
    same = sum(key(x) == key(y) for x, y in zip(a, b))
    first = next((x["step"] for x, y in zip(a, b) if key(x) != key(y)), None)
    print(f"deterministic {m}: {len(a)}/{len(b)} logged rows, {same} identical, first difference at step {first}")
PY
grep -h -i "deterministic" $W/det-*.log | sort | uniq -c | head
