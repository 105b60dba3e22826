#!/usr/bin/env bash
# Device call: tokens a step. The paper-size model (d_model 384, 6 layers) with the packed curriculum, 1024 packed
# rows of 256 positions (262k tokens a step, 4x every earlier addition run), lr 3e-3, 1000 steps (ramp over 700),
# compiled and replayed from CUDA graphs, one seed; three runs at once on one H200. Run from the repository root;
# writes $OUT/tokens.tgz and a table.
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=4
W=/tmp/tokens; mkdir -p $W/runs
RUN_S=${RUN_S:-520}
BASE="--task addition --preset addition-paper --seed 0 --max-steps 1000 --set data.curriculum=linear
  --set data.start_width=1 --set data.ramp_steps=700 --set data.packing=true --set data.seq_len=256
  --set train.batch_size=1024 --set optim.lr=3e-3 --set train.compile=true --set train.cuda_graphs=true
  --set train.val_every=100 --set train.ckpt_every=100000 --set eval.n_per_length=50 --set eval.free_per_length=0"
launch() {  # name mixer settings...
  local name=$1 mixer=$2; shift 2
  timeout --signal=INT --kill-after=30 $RUN_S python -m lab train $BASE --mixer $mixer "$@" \
    --out $W/runs/$name --results $W/reg > $W/$name.log 2>&1 &
}
launch f1a3-b1024-3e3 falcon-1a.3
launch f13-b1024-3e3 falcon-1.3
launch f13-ab-b1024-3e3 falcon-1.3 --set model.abacus=32
wait
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
tar czf "$OUT/tokens.tgz" --exclude='checkpoints' --exclude='*.pt' --exclude='*.lock' -C $W .
for d in $W/runs/*; do
  echo "== $(basename $d)"
  [ -f $d/evals.csv ] && cut -d, -f1,2,3,6,7 $d/evals.csv | column -t -s, | tail -n 11
done
for f in $W/*.log; do echo "== $(basename $f)"; grep -v "^step" $f | grep -i -E "error|finished|stopped" | tail -n 2; done
