#!/usr/bin/env bash
# Running parity trained on lengths 1-40 and tested on 41-256 at d_model 128 (2 layers, 1500 steps): the regression
# rules with the gain bounded at 2 (falcon-1.3, falcon-1 with the .1 settings, DeltaNet), then falcon-1.3 and DeltaNet
# bounded at 1, seeds 0-2, two runs at a time, one thread each. Run from the repository root: bash records/tasks/beta/parity-40/d128/run.sh [RESULTS]
# then: python records/tasks/beta/study.py RESULTS RESULTS
set -u
export OMP_NUM_THREADS=1
R=${1:-results/beta40-d128}
mkdir -p "$R/logs"
jobs=()
for seed in 0 1 2; do
  jobs+=("falcon-1.3|eta_max=2.0|$seed|f13-eta2")
  jobs+=("falcon-1|qk_norm=l2,gain=ctx_beta,beta_max=2.0|$seed|f11-beta2")
  jobs+=("deltanet|beta_max=2.0|$seed|dn-beta2")
done
for seed in 0 1 2; do  # bound 1 beside them, for falcon-1.3 and DeltaNet
  jobs+=("falcon-1.3|eta_max=1.0|$seed|f13-eta1")
  jobs+=("deltanet|beta_max=1.0|$seed|dn-beta1")
done
run() {
  IFS='|' read -r mixer opts seed name <<< "$1"
  local sets=()
  IFS=',' read -ra pairs <<< "$opts"
  for p in "${pairs[@]}"; do sets+=(--set "model.mixer_options.$p"); done
  python -m lab train --preset parity-tiny --mixer "$mixer" --seed "$seed" "${sets[@]}" --set model.d_model=128 \
    --set 'data.lengths=[1,40]' --set 'data.test_lengths=[41,256]' --set train.max_steps=1500 \
    --set train.val_every=500 --set train.ckpt_every=500 \
    --out "$R/runs/$name-s$seed" --results "$R" --no-progress > "$R/logs/$name-s$seed.log" 2>&1
}
for ((i = 0; i < ${#jobs[@]}; i += 2)); do
  for ((j = i; j < i + 2 && j < ${#jobs[@]}; j++)); do run "${jobs[j]}" & done
  wait
done
