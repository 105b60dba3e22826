#!/usr/bin/env bash
# The model-size axis at CPU scale: the tiny addition table's falcon-1.3 row (addition-cpu: d_model 128, 2 layers,
# digit positions, isolated samples, widths 1-6 trained, 7-10 held out, 700 steps) at d_model 256 x 4 layers
# (7.3 times the parameters), seeds 0-2, and at its own size over twice the steps (1400, ramp over 700), seed 0.
# Run from the repository root: bash records/addition/cpu_size/run.sh [RESULTS] (default /tmp/size_cpu)
export OMP_NUM_THREADS=1
R=${1:-/tmp/size_cpu}
one() { # name seed sets...
  local name=$1 seed=$2; shift 2
  python -m lab train --task addition --preset addition-cpu --mixer falcon-1.3 --set model.abacus=4 \
    --set model.isolate_samples=true --seed $seed "$@" --out $R/runs/$name-s$seed --results $R --no-progress \
    > $R/$name-s$seed.log 2>&1
}
one d256x4 0 --set model.d_model=256 --set model.n_layers=4 --set model.n_heads=4 &
one d256x4 1 --set model.d_model=256 --set model.n_layers=4 --set model.n_heads=4 &
wait
one d256x4 2 --set model.d_model=256 --set model.n_layers=4 --set model.n_heads=4 &
one d128x2-1400 0 --max-steps 1400 --set data.ramp_steps=700 &
wait
