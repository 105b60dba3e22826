#!/usr/bin/env bash
# One short device call: the training-step anatomy with the forward through torch.compile
# (train.compile), for three mixers whose eager numbers call A measured. LAB_COMMIT set; writes $OUT.
set -u
export PYTHONUNBUFFERED=1
mkdir -p /tmp/out/step
timeout 170 python -m lab bench step --preset small --steps 20 --set train.compile=true \
  --mixers transformer,falcon-1a.3,mamba2 --out /tmp/out/step > /tmp/out/step/console.log 2>&1 \
  || echo "bench step exited $?"
tar czf "$OUT/out.tgz" -C /tmp/out .
cat /tmp/out/step/step.md; tail -5 /tmp/out/step/console.log
