#!/usr/bin/env bash
# Device call: what a compiled addition run on the GPU does with `timeout --signal=INT` when started in the
# background (`&`, as regime_long.sh's shared calls start theirs): the process tree before the signal, the
# trainer's own exit status, its log's end and its run.json. Run from the repository root; writes $OUT/sig.
set -u
W=$OUT/sig; mkdir -p $W
export PYTHONUNBUFFERED=1 PYTHONFAULTHANDLER=1
ARGS="--task addition --preset addition-paper --seed 0 --mixer falcon-1.3 --set data.curriculum=linear"
ARGS+=" --set data.start_width=1 --set data.packing=true --set data.seq_len=256 --set train.ckpt_every=100000"
ARGS+=" --set train.val_every=100000 --set train.compile=true --max-steps 100000 --no-progress"  # one line: bash -c
timeout --signal=INT --kill-after=15 ${RUN_S:-70} bash -c "python -m lab train $ARGS --out /tmp/sig/run \
  --results /tmp/sig/res > $W/run.log 2>&1; echo trainer_rc=\$? >> $W/rc.txt" &
sleep $(( ${RUN_S:-70} - 5 )); ps -eo pid,pgid,stat,etimes,cmd --forest | grep -v " ps " | tail -25 > $W/ps.txt
wait; echo "timeout_rc=$?" >> $W/rc.txt
cp /tmp/sig/run/run.json $W/ 2>/dev/null || cp results/runs/*/run.json $W/ 2>/dev/null
cat $W/rc.txt; tail -5 $W/run.log; grep -o '"status": "[a-z]*", "steps": [0-9]*' $W/run.json; grep -v "^ *[0-9]* *[0-9]* *S.*kworker" $W/ps.txt | tail -12
