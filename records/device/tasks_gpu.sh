#!/usr/bin/env bash
# Device call: the synthetic-task studies on one H200, many small runs sharing the GPU (JOBS at once): PARTS (default
# "beta-parity beta-s5 mqar-width", in order) of
#   beta-parity  the gain's range on running parity (records/tasks/beta/run.sh, CONTROL=1: falcon-1.3, falcon-1 .1,
#                DeltaNet and the control falcon-1a.3, bound 1 or 2, seeds 0-2; 24 runs)
#   beta-s5      the same grid on S5 composition (TASK=permutation; 24 runs)
#   beta-s5-large  the S5 grid at d_model 128, 4 layers, 4 heads, batch 64, lr 1e-3, S5_STEPS steps (default 10000),
#                into RESULTS/beta-large: the size at which DeltaNet (β < 1 and < 2 alike) began to compose S5 on a CPU
#                in 3000 steps (records/tasks/s5_probe/)
#   mqar-width   MQAR against d_model for eight mixers (records/tasks/mqar_width/run.sh with MQW_WIDTHS, default
#                "64 128 256", 3 seeds, MQW_STEPS default 1800, MQW_LR a rate for every run, default the
#                preset's 3e-3: run it at 1e-3 too, records/tasks/mqar_width/lr/README.md; 72 runs a rate)
# A call cut by its time keeps every finished run; carry RESULTS (default results/tasks) into the next call to go on.
#   LAB_COMMIT=<sha> BUDGET_S=520 bash records/device/tasks_gpu.sh      (writes $OUT/tasks.tgz)
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
R=${RESULTS:-results/tasks}; BUDGET_S=${BUDGET_S:-520}; JOBS=${JOBS:-14}
PARTS=${PARTS:-beta-parity beta-s5 mqar-width}
t0=$(date +%s)
left() { echo $(( BUDGET_S - ($(date +%s) - t0) )); }
for part in $PARTS; do
  [ "$(left)" -gt 60 ] || break
  echo "$part: start at $(( $(date +%s) - t0 )) s"
  case $part in
    beta-parity) JOBS=$JOBS CONTROL=1 timeout --signal=INT --kill-after=20 $(left) bash records/tasks/beta/run.sh $R/beta ;;
    beta-s5) TASK=permutation JOBS=$JOBS CONTROL=1 timeout --signal=INT --kill-after=20 $(left) \
      bash records/tasks/beta/run.sh $R/beta ;;
    beta-s5-large) TASK=permutation JOBS=$JOBS CONTROL=1 SETS="model.d_model=128 model.n_layers=4 model.n_heads=4 \
      train.batch_size=64 train.max_steps=${S5_STEPS:-10000} train.val_every=1000 train.ckpt_every=1000 optim.lr=1e-3 \
      optim.warmup_steps=100" timeout --signal=INT --kill-after=20 $(left) bash records/tasks/beta/run.sh $R/beta-large ;;
    mqar-width) MIXERS=transformer,retnet,mamba2,deltanet,gated-deltanet,falcon-1a.3,falcon-3a.3,falcon-1.3 \
      WIDTHS=${MQW_WIDTHS:-64 128 256} SEEDS=3 STEPS=${MQW_STEPS:-1800} JOBS=$JOBS LR=${MQW_LR:-} \
      timeout --signal=INT --kill-after=20 $(left) bash records/tasks/mqar_width/run.sh $R/mqar_width ;;
    *) echo "tasks_gpu.sh: unknown part $part" >&2 ;;
  esac
  echo "$part: end at $(( $(date +%s) - t0 )) s, $(grep -l '"finished"' $R/*/runs/*/run.json $R/beta/*/runs/*/run.json 2>/dev/null | wc -l) runs finished in all"
done
nvidia-smi --query-gpu=name --format=csv,noheader > $R/gpu.txt
[ -d $R/mqar_width/runs ] && LR=${MQW_LR:-} python records/tasks/mqar_width/study.py $R/mqar_width \
  $R/mqar_width${MQW_LR:+/lr$MQW_LR} > /dev/null 2>&1
tar czf "$OUT/tasks.tgz" --exclude='checkpoints' --exclude='*.pt' --exclude='*.ckpt' --exclude='*.lock' -C $R .
[ -f $R/mqar_width${MQW_LR:+/lr$MQW_LR}/table.md ] && cat $R/mqar_width${MQW_LR:+/lr$MQW_LR}/table.md
