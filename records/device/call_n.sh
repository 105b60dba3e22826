#!/usr/bin/env bash
# The addition table's seeds on two H200s, one call of several: each call resumes the campaigns where the
# last one stopped them (SIGINT ends every run after its current step with a checkpoint there; on a machine
# kept warm the checkpoints are still in results/runs, on a fresh one the unfinished runs start again).
# First call of a machine: STEP=1 measures the step with CUDA graphs (GPU 0, a minute); GRAPHS=1 trains the
# runs with train.cuda_graphs=true (not part of a run's id, so the seeds join seed 0's runs in one table).
# MPS=1 starts the CUDA MPS daemon first, so that the runs sharing a GPU overlap their kernels instead of
# taking turns (each is a small model whose step leaves most of the GPU idle); it is stopped at the end.
# Run from the repository root with LAB_COMMIT and BUDGET_S set; writes $OUT/out.tgz (no weights).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out_n; mkdir -p $W
t0=$(date +%s)
if [ "${STEP:-0}" = 1 ]; then
  mkdir -p $W/step_graphs
  for g in false true; do
    CUDA_VISIBLE_DEVICES=0 timeout 150 python -m lab bench step --preset addition-paper --steps 20 \
      --set train.cuda_graphs=$g --mixers transformer,falcon-1a.3,falcon-1.3 --out $W/step_graphs/$g \
      > $W/step_graphs/console_$g.log 2>&1 || echo "bench step (graphs $g) exited $?"
    cut -d'|' -f2-12 $W/step_graphs/$g/step.md 2>/dev/null | grep -v "^---"
  done
fi
if [ "${MPS:-0}" = 1 ]; then
  nvidia-cuda-mps-control -d && echo "MPS daemon started" || echo "MPS daemon did not start; runs take turns"
fi
GRAPHS_SET=""; [ "${GRAPHS:-0}" = 1 ] && GRAPHS_SET="--set train.cuda_graphs=true"
CURRICULUM="--set data.curriculum=linear --set data.start_width=1 --set data.ramp_steps=1500"
left=$(( ${BUDGET_S:-540} - ($(date +%s) - t0) ))
timeout --signal=INT --kill-after=50 $left python -m lab reproduce addition --seeds ${SEEDS:-3} --gpus 2 \
  --per-gpu ${PER_GPU:-7} $GRAPHS_SET > $W/reproduce_console.log 2>&1 &
timeout --signal=INT --kill-after=50 $left python -m lab reproduce addition --seeds ${SEEDS:-3} --gpus 2 \
  --per-gpu 1 --rows falcon-1a.3,transformer $CURRICULUM $GRAPHS_SET --out results/addition/curriculum \
  > $W/curriculum_console.log 2>&1 &
wait
[ "${MPS:-0}" = 1 ] && echo quit | nvidia-cuda-mps-control
echo "campaigns stopped at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/out.tgz" --exclude='*.ckpt' --exclude='best.pt' --exclude='*.lock' -C $W . \
  -C "$PWD/results" addition runs lab.db
tail -n 6 $W/reproduce_console.log; tail -n 3 $W/curriculum_console.log
grep "^| [A-Z]" results/addition/table.md | head -14 | cut -d'|' -f2,4,6,8
