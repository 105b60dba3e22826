#!/usr/bin/env bash
# One device call for the kernels: the falcon-1/falcon-2 checks at real sizes (T = 2048 and 16384, bf16 and
# fp32, every gradient) with their timings and per-kernel profiles (fla's chunk_delta_rule profiled beside
# them), then `lab bench kernels` at the three shapes with fla's anchors. fla-core is carried as a wheel
# (.whl/). Run from the repository root with LAB_COMMIT set; writes $OUT/out.tgz.
set -u
export PYTHONUNBUFFERED=1
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl/fla_core-*.whl .whl/einops-*.whl && export PYTHONPATH=/tmp/site
W=/tmp/out; mkdir -p $W/check $W/kernels
t0=$(date +%s)
timeout 240 python -m falcon_lab.kernels.falcon.gpu_check_regression --out $W/check --commit "$LAB_COMMIT" --no-sweeps --no-fla \
  > $W/check/console.log 2>&1 || echo "gpu_check exited $?"
echo "gpu_check stopped at $(( $(date +%s) - t0 )) s"
timeout --signal=INT 330 python -m lab bench kernels --out $W/kernels > $W/kernels/console.log 2>&1 \
  || echo "bench kernels exited $?"
echo "bench kernels stopped at $(( $(date +%s) - t0 )) s"
tar czf "$OUT/out.tgz" -C $W .
grep "^| check\|^| error" $W/check/console.log | cut -c1-160
cut -c1-110 $W/kernels/console.log | tail -60
