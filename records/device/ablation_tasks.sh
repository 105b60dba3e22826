#!/usr/bin/env bash
# Device call: the alignment ablation (timing RAW/RBW x write pairing shifted/same-time) on the synthetic tasks,
# on one H200: MQAR at d_model 128 (where DeltaNet and falcon-1a.3 learn it at toy size), then running parity
# (falcon-1.3 and DeltaNet keep held-out strings whole there with the gain allowed past 1), 3 seeds a cell, many
# small runs sharing the GPU (`--per-gpu`). A call cut by its time keeps every finished run (checkpoints stay
# behind, so an unfinished run starts over); carry the results
# folder (RESULTS, default results/) into the next call to go on where it stopped.
# MQAR_STEPS (default 1800: three times the CPU grid's 600, the length over which its probes learned every cell)
# sets the MQAR runs' steps; TASKS (default "mqar parity") the tasks, in order.
#   LAB_COMMIT=<sha> BUDGET_S=520 bash records/device/ablation_tasks.sh       (writes $OUT/ablation.tgz)
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
R=${RESULTS:-results}; BUDGET_S=${BUDGET_S:-520}; PER_GPU=${PER_GPU:-12}
MIXERS=${MIXERS:-falcon-1a.3,falcon-3a.3,falcon-1.3,deltanet,gated-deltanet,retnet,mamba2}
MQAR_STEPS=${MQAR_STEPS:-1800}; TASKS=${TASKS:-mqar parity}
t0=$(date +%s)
left() { echo $(( BUDGET_S - ($(date +%s) - t0) )); }
if [[ " $TASKS " == *" mqar "* ]]; then
  timeout --signal=INT --kill-after=20 $(left) python -m lab ablate alignment --task mqar --mixers $MIXERS \
    --seeds 3 --per-gpu $PER_GPU --max-steps $MQAR_STEPS --set model.d_model=128 --results $R 2>&1 \
    | tail -n 90 > "$OUT/mqar.log"
fi
if [[ " $TASKS " == *" parity "* ]] && [ "$(left)" -gt 60 ]; then
  timeout --signal=INT --kill-after=20 $(left) python -m lab ablate alignment --task parity --mixers $MIXERS \
    --seeds 3 --per-gpu $PER_GPU --results $R 2>&1 | tail -n 90 > "$OUT/parity.log"
fi
for t in mqar parity; do
  [ -f $R/ablation/$t/alignment.csv ] && python -m lab plot ablation --table $R/ablation/$t > /dev/null 2>&1
done
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.txt
tar czf "$OUT/ablation.tgz" --exclude='*.pt' --exclude='*.ckpt' --exclude='*.lock' -C $R .
for t in mqar parity; do [ -f "$OUT/$t.log" ] && tail -n 3 "$OUT/$t.log"; done
for t in mqar parity; do
  [ -f $R/ablation/$t/alignment.csv ] && python - "$R/ablation/$t/alignment.csv" <<'PY'
import sys, pandas as pd
f = pd.read_csv(sys.argv[1]); f = f[f.runs > 0]
print(sys.argv[1]); print(f[["row", "cell", "runs", "val_acc_mean", "ood_mean_mean", "token_ood_mean_mean"]].round(1).to_string(index=False))
PY
done
