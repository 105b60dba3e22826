#!/usr/bin/env bash
# The figures of README.md here, in order: each line's cache directory is emptied first except the last's.
set -eu
S=records/bench/compile_cold_cpu/compile_time.py
for m in falcon-1a.3 falcon-1.3; do
  rm -rf /tmp/ic_$m; TORCHINDUCTOR_CACHE_DIR=/tmp/ic_$m python $S $m whole 2>&1 | tail -n 1
done
rm -rf /tmp/ic_r; TORCHINDUCTOR_CACHE_DIR=/tmp/ic_r python $S falcon-1a.3 regional 2>&1 | tail -n 1
TORCHINDUCTOR_CACHE_DIR=/tmp/ic_falcon-1.3 python $S falcon-1a.3 whole 2>&1 | tail -n 1  # warm: after falcon-1.3
