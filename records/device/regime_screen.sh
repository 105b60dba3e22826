#!/usr/bin/env bash
# Device call: a screen of addition regimes on one H200, every run at once (each its own `lab train` process).
# The paper-size model (d_model 384, 6 layers) with the packed curriculum, 1500 steps (ramp over 1000), one seed;
# what varies: isolated samples (`model.isolate_samples`), digit positions (`model.abacus=32`), the learning rate
# and the tokens a step. Run from the repository root with LAB_COMMIT set; writes $OUT/screen.tgz and a table.
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2
W=/tmp/screen; mkdir -p $W/runs
RUN_S=${RUN_S:-470}
BASE="--task addition --preset addition-paper --seed 0 --max-steps ${STEPS:-1500} --set data.curriculum=linear
  --set data.start_width=1 --set data.ramp_steps=${RAMP:-1000} --set data.packing=true --set data.seq_len=256
  --set train.val_every=250 --set train.ckpt_every=100000 --set eval.n_per_length=50 --set eval.free_per_length=0"
ISO="--set model.isolate_samples=true"; AB="--set model.abacus=32"
launch() {  # name mixer settings...
  local name=$1 mixer=$2; shift 2
  timeout --signal=INT --kill-after=30 $RUN_S python -m lab train $BASE --mixer $mixer "$@" \
    --out $W/runs/$name --results $W/reg > $W/$name.log 2>&1 &
}
launch f1a3-iso-ab-3e3 falcon-1a.3 $ISO $AB --set optim.lr=3e-3
launch f13-iso-ab-3e3 falcon-1.3 $ISO $AB --set optim.lr=3e-3
launch gdn-iso-ab-3e3 gated-deltanet $ISO $AB --set optim.lr=3e-3
launch mamba2-iso-ab-3e3 mamba2 $ISO $AB --set optim.lr=3e-3
launch f1a3-iso-ab-1e3 falcon-1a.3 $ISO $AB --set optim.lr=1e-3
launch f13-iso-ab-1e3 falcon-1.3 $ISO $AB --set optim.lr=1e-3
launch f1a3-ab-3e3 falcon-1a.3 $AB --set optim.lr=3e-3
launch f13-ab-3e3 falcon-1.3 $AB --set optim.lr=3e-3
launch f1a3-iso-3e3 falcon-1a.3 $ISO --set optim.lr=3e-3
launch f1a3-iso-ab-3e3-b1024 falcon-1a.3 $ISO $AB --set optim.lr=3e-3 --set train.batch_size=1024
wait
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
tar czf "$OUT/screen.tgz" --exclude='checkpoints' --exclude='*.pt' --exclude='*.lock' -C $W .
python - <<'PY'
import csv, glob, os
rows = []
for d in sorted(glob.glob("/tmp/screen/runs/*")):
    p = os.path.join(d, "evals.csv")
    if not os.path.exists(p):
        print(os.path.basename(d), "no evals"); continue
    ev = list(csv.DictReader(open(p)))
    best = max(ev, key=lambda r: float(r["val_acc"]))
    last = ev[-1]
    print(f"{os.path.basename(d):24s} last {last['step']:>5s} val {float(last['val_acc']):5.1f} tok {float(last['val_token_acc']):5.1f} "
          f"ood {float(last['ood_mean']):5.1f} ood_tok {float(last['ood_token_mean']):5.1f} | best {best['step']:>5s} {float(best['val_acc']):5.1f}")
PY
for f in $W/*.log; do echo "== $(basename $f)"; grep -v "^step" $f | grep -i -E "error|Traceback|finished|stopped" | tail -n 3; done
