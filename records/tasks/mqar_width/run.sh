#!/usr/bin/env bash
# MQAR recall against model width (zoology's figure) at toy size on a CPU: the mqar-tiny preset (2 layers, 2 heads,
# 600 steps of batch 32; 16-32 tokens trained, 33-64 held out with more pairs) at d_model 32, 64 and 128, for the
# transformer, DeltaNet, falcon-1a.3 and falcon-1.3, seeds 0-1, two runs at a time.
# Run from the repository root: bash records/tasks/mqar_width/run.sh [RESULTS]; then python .../study.py RESULTS
set -u
R=${1:-results/mqar_width}
jobs=()
for seed in 0 1; do
  for d in 32 64 128; do
    for mixer in transformer deltanet falcon-1a.3 falcon-1.3; do jobs+=("$mixer $d $seed"); done
  done
done
run() {
  read -r mixer d seed <<< "$1"
  local name="$mixer-d$d-s$seed"
  [ -f "$R/runs/$name/run.json" ] && grep -q '"finished"' "$R/runs/$name/run.json" && return
  python -m lab train --preset mqar-tiny --mixer "$mixer" --seed "$seed" --set "model.d_model=$d" \
    --out "$R/runs/$name" --results "$R" --no-progress > "$R/logs/$name.log" 2>&1
}
mkdir -p "$R/logs"
for ((i = 0; i < ${#jobs[@]}; i += 2)); do
  run "${jobs[i]}" &
  [ $((i + 1)) -lt ${#jobs[@]} ] && run "${jobs[i + 1]}" &
  wait
done
