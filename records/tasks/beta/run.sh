#!/usr/bin/env bash
# The gain's range on running parity at toy size (the parity-tiny preset: lengths 1-16 trained, 17-64 held out), on
# a CPU: each mixer with its gain bounded so the transition's eigenvalue along the written key stays in [0, 1)
# (bound 1) or may reach (-1, 0) (bound 2), seeds 0-2. falcon-1.3 and falcon-1a.3 bound their ctxη step by
# eta_max (eta·E_ref < eta_max), falcon-1 with the .1 settings (QK-l2, ctxβ, ctxλ) its ctxβ gain by beta_max,
# DeltaNet its β by beta_max. CONTROL=1 adds falcon-1a.3 (inner-product writes: no eigenvalue 1 - β along the
# key, so the bound should not matter).
# Two runs at a time (JOBS=N for more). TASK=permutation runs the same grid on S5 composition (permutation-tiny)
# into RESULTS/permutation. SETS="<key=value> ..." gives every run those settings too (a larger model, more steps:
# records/device/tasks_gpu.sh's beta-s5-large); name RESULTS apart for them, since a run's folder is its grid name. Run from the repository root: bash records/tasks/beta/run.sh [RESULTS]
set -u
TASK=${TASK:-parity}
case $TASK in parity|permutation) ;; *) echo "run.sh: TASK must be parity or permutation, got $TASK" >&2; exit 2;; esac
R=${1:-results/beta}
[ "$TASK" = parity ] || R=$R/$TASK
jobs=()
for seed in 0 1 2; do
  for bound in 1 2; do
    jobs+=("falcon-1.3|eta_max=$bound.0|$seed|f13-eta$bound")
    jobs+=("falcon-1|qk_norm=l2,gain=ctx_beta,beta_max=$bound.0|$seed|f11-beta$bound")
    jobs+=("deltanet|beta_max=$bound.0|$seed|dn-beta$bound")
    [ "${CONTROL:-0}" = 1 ] && jobs+=("falcon-1a.3|eta_max=$bound.0|$seed|f1a3-eta$bound")
  done
done
run() {
  IFS='|' read -r mixer opts seed name <<< "$1"
  [ -f "$R/runs/$name-s$seed/run.json" ] && grep -q '"finished"' "$R/runs/$name-s$seed/run.json" && return
  local sets=()
  IFS=',' read -ra pairs <<< "$opts"
  for p in "${pairs[@]}"; do sets+=(--set "model.mixer_options.$p"); done
  for p in ${SETS:-}; do sets+=(--set "$p"); done
  python -m lab train --preset $TASK-tiny --mixer "$mixer" --seed "$seed" "${sets[@]}" \
    --out "$R/runs/$name-s$seed" --results "$R" --no-progress > "$R/logs/$name-s$seed.log" 2>&1
}
mkdir -p "$R/logs"
JOBS=${JOBS:-2}  # runs at once (a GPU takes many of these small runs side by side)
for ((i = 0; i < ${#jobs[@]}; i += JOBS)); do
  for ((j = i; j < i + JOBS && j < ${#jobs[@]}; j++)); do run "${jobs[j]}" & done
  wait
done
