#!/usr/bin/env bash
# ctxη's bound for the regression rules, on a CPU: falcon-1.3 with eta_bound=ridge (the default since commit
# 67f9d15: η(‖x‖² + λ) < eta_max, the transition's eigenvalue along x in (−1, 1)) against eta_bound=energy (the
# bound before it: η‖x‖² < eta_max, the eigenvalue down to ε_γ − 2), seeds 0-2, two runs at a time (BOUNDS, default
# "ridge energy").
#   TASK=mqar   (default) mqar-tiny at d_model 128, lr 3e-3, STEPS (default 1800): the MQAR grid's own cell
#               (../../ablation/mqar-gpu: falcon-1.3 unstable in every cell at this rate)
#   TASK=parity parity-tiny with eta_max=2 (../beta: falcon-1.3 learned eigenvalues down to −1.5 there)
#   TASK=addition the tiny addition table's falcon-1.3 row (addition-cpu, digit positions, isolated samples:
#               widths 1-6 trained, 7-10 held out; ../../addition/tiny)
# Run from the repository root: bash records/tasks/eta_bound/run.sh [RESULTS]   (default results/eta_bound)
set -u
TASK=${TASK:-mqar}; R=${1:-results/eta_bound}/$TASK; STEPS=${STEPS:-1800}
case $TASK in
  mqar) SETS="--preset mqar-tiny --set model.d_model=128 --max-steps $STEPS" ;;
  parity) SETS="--preset parity-tiny --set model.mixer_options.eta_max=2.0" ;;
  addition) SETS="--task addition --preset addition-cpu --set model.abacus=4 --set model.isolate_samples=true" ;;
  *) echo "run.sh: TASK must be mqar, parity or addition, got $TASK" >&2; exit 2 ;;
esac
mkdir -p "$R/logs"
run() {  # bound seed
  local name=f13-$1-s$2
  [ -f "$R/runs/$name/run.json" ] && grep -q '"finished"' "$R/runs/$name/run.json" && return
  python -m lab train --mixer falcon-1.3 $SETS --seed $2 --set model.mixer_options.eta_bound=$1 \
    --out "$R/runs/$name" --results "$R" --no-progress > "$R/logs/$name.log" 2>&1
}
BOUNDS=${BOUNDS:-ridge energy}  # BOUNDS=ridge: the new bound alone (the energy bound's parity runs: ../beta)
pending=()
for seed in 0 1 2; do for b in $BOUNDS; do pending+=("$b $seed"); done; done
for ((i = 0; i < ${#pending[@]}; i += 2)); do
  run ${pending[i]} & [ $((i + 1)) -lt ${#pending[@]} ] && run ${pending[i + 1]} & wait
done
