#!/usr/bin/env bash
# MQAR recall against model width (zoology's figure): the mqar-tiny preset (2 layers, 2 heads, batch 32; 16-32
# tokens trained, 33-64 held out with more pairs). The committed CPU study: d_model 32, 64 and 128, the transformer,
# DeltaNet, falcon-1a.3 and falcon-1.3, seeds 0-1, 600 steps, two runs at a time (the defaults below). On a GPU set
# MIXERS (comma-separated), WIDTHS, SEEDS (a count), STEPS and JOBS (runs at once), e.g.
#   MIXERS=transformer,retnet,mamba2,deltanet,gated-deltanet,falcon-1a.3,falcon-3a.3,falcon-1.3 \
#   WIDTHS="64 128 256" SEEDS=3 STEPS=1800 JOBS=14 bash records/tasks/mqar_width/run.sh RESULTS
# LR=1e-3 trains every run at that rate (lr/README.md: the rate decides the transformer's row). Finished runs are
# skipped. Run from the repository root: bash records/tasks/mqar_width/run.sh [RESULTS]; then
# python records/tasks/mqar_width/study.py RESULTS [OUT]
set -u
R=${1:-results/mqar_width}
MIXERS=${MIXERS:-transformer,deltanet,falcon-1a.3,falcon-1.3}; WIDTHS=${WIDTHS:-32 64 128}
SEEDS=${SEEDS:-2}; STEPS=${STEPS:-600}; JOBS=${JOBS:-2}
LR=${LR:-}  # a learning rate for every run (default the preset's 3e-3); its runs are named ...-lr<LR>
jobs=()
for ((seed = 0; seed < SEEDS; seed++)); do
  for d in $WIDTHS; do
    for mixer in ${MIXERS//,/ }; do jobs+=("$mixer $d $seed"); done
  done
done
run() {
  read -r mixer d seed <<< "$1"
  local name="$mixer-d$d-s$seed${LR:+-lr$LR}"
  [ -f "$R/runs/$name/run.json" ] && grep -q '"finished"' "$R/runs/$name/run.json" && return
  python -m lab train --preset mqar-tiny --mixer "$mixer" --seed "$seed" --set "model.d_model=$d" \
    --max-steps "$STEPS" ${LR:+--set optim.lr=$LR} --out "$R/runs/$name" --results "$R" --no-progress > "$R/logs/$name.log" 2>&1
}
mkdir -p "$R/logs"
for ((i = 0; i < ${#jobs[@]}; i += JOBS)); do
  for ((j = i; j < i + JOBS && j < ${#jobs[@]}; j++)); do run "${jobs[j]}" & done
  wait
done
