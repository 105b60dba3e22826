#!/usr/bin/env bash
# One device call on two H200s of one host: the kernels' last figures (call_h.sh) alone on GPU 0 while the
# rules study resumes (call_g.sh, eight trials) on GPU 1. The two share only the host's 32 cores.
# Run from the repository root with LAB_COMMIT set; call_h writes under $OUT, call_g packs $OUT/out.tgz.
set -u
nvidia-smi -L
(CUDA_VISIBLE_DEVICES=0 timeout 560 bash records/device/call_h.sh > "$OUT/call_h.console" 2>&1) &
(CUDA_VISIBLE_DEVICES=1 PRUNE_AFTER=${PRUNE_AFTER:-300} SWEEP_S=${SWEEP_S:-440} bash records/device/call_g.sh \
  > "$OUT/call_g.console" 2>&1) &
wait
cat "$OUT/call_h.console"; tail -12 "$OUT/call_g.console"
