#!/usr/bin/env bash
# One device call: the training-step anatomy, every mixer's short GPU run, and the triton regression
# check with its solve-precision sweep. Run from the repository root with LAB_COMMIT set. Everything is
# written under /tmp/out and packed into $OUT/out.tgz after each stage ($OUT returns at most 8 files).
set -u
export PYTHONUNBUFFERED=1
W=/tmp/out; mkdir -p $W/step $W/train $W/check
pack() { tar czf "$OUT/out.tgz" -C $W . ; }
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
python -c "import torch, triton, lightning; print(torch.__version__, triton.__version__, lightning.__version__)"
t0=$(date +%s)
timeout 100 python -m lab bench step --preset small --steps 20 --out $W/step \
  --mixers transformer,retnet,mamba2,gated-deltanet,falcon-1,falcon-1a,falcon-1a.3,falcon-3a.3 \
  > $W/step/console.log 2>&1 || echo "bench step exited $?"
pack; echo "step anatomy done at $(( $(date +%s) - t0 )) s"
timeout 320 python -m lab bench train --preset small --max-steps 150 --timeout 45 \
  --out $W/train --work /tmp/runs > $W/train/console.log 2>&1 || echo "bench train exited $?"
pack; echo "bench train done at $(( $(date +%s) - t0 )) s"
timeout 140 python -m falcon_lab.kernels.falcon.gpu_check_regression --out $W/check --commit "$LAB_COMMIT" --quick \
  > $W/check/console.log 2>&1 || echo "gpu check exited $?"
pack; echo "gpu check done at $(( $(date +%s) - t0 )) s"
cat $W/step/step.md
grep "^|" $W/train/train.md | cut -d'|' -f2-8
grep "^|" $W/check/console.log
