#!/usr/bin/env bash
# Device call: the packed-exact table (exact digit positions, the fit regime of
# records/addition/regime-2026-12-03; issue 29: every row over three seeds) a piece at a time on one H200.
# `lab reproduce addition --preset packed-exact`, compiled and graphed, PER_GPU runs at a time (default 2: a compiled
# falcon-1.3 alone fills the GPU, but the rows on PyTorch forms or slower kernels, Gated DeltaNet at 0.46M tokens a
# second alone, gave three sharing a GPU 0.2-0.6M each in the packed table). The runs already recorded (records/addition/packed-exact/runs, committed
# by earlier calls) are merged into results/ first, so the campaign skips them and trains the next ones in its
# order (seed by seed: every row of seed 0 first; ROWS and SEEDS narrow it). It stops with a checkpoint (SIGINT)
# when BUDGET_S is spent; an unfinished run resumes in the next call only on the same warm machine. START_S (the
# campaign's --start-within) starts no run after that many seconds, so the last call of a session starts only runs
# it can end (a run cut there is lost with the machine).
# Run from the repository root with LAB_COMMIT set; writes $OUT/out.tgz (run records, no weights) and prints the
# campaign's last lines. Afterwards, here: extract out.tgz, `lab runs merge <x>/results`, copy the finished runs'
# folders (no checkpoints) to records/addition/packed-exact/runs/, and `lab reproduce addition --preset packed-exact
# --table-only --out records/addition/packed-exact` writes the table.
# ABLATE=<mixers> runs the alignment ablation's other three cells in this regime instead (`lab ablate alignment
# --preset packed-exact`; the default cell is the table's run), its runs recorded beside the table's.
#   LAB_COMMIT=<sha> BUDGET_S=540 ROWS=falcon-1a.3,deltanet bash records/device/exact_table.sh
#   LAB_COMMIT=<sha> BUDGET_S=565 START_S=200 bash records/device/exact_table.sh   # a session's last call
#   LAB_COMMIT=<sha> BUDGET_S=540 ABLATE=falcon-1.3,falcon-1a.3 SEEDS=1 bash records/device/exact_table.sh
# PRESET=exact-isolated (its samples apart) runs that preset's table the same way, recorded under
# records/addition/exact-isolated; it replays no CUDA graph (a step's work changes with its samples). So does
# PRESET=isolated-offsets (its runs under records/addition/isolated-offsets/table), and PRESET=same-time (the Falcon
# rows with same-time writes, no output gate, no ridge), whose first runs are records/addition/falcon-same-time's and
# isolated-offsets' DeltaNet runs (merged too; the table's own runs go to records/addition/same-time/runs).
#   LAB_COMMIT=<sha> BUDGET_S=565 PRESET=same-time ROWS=falcon-1a.2,falcon-3a.3 bash records/device/exact_table.sh
#   LAB_COMMIT=<sha> BUDGET_S=565 PRESET=exact-isolated SEEDS=1 bash records/device/exact_table.sh
# BUDGET_S must stay under the call's limit_s, which is the device time left when that is less than timeout_s: a
# call killed at its limit returns only what lies under $OUT, so out.tgz is also written every SNAP_S seconds
# (default 60) while the campaign runs, and a killed call still returns the runs as they were a minute before.
# BESIDE="<lab arguments>;<lab arguments>" runs other campaigns on the same GPU at the same time, each
# `python -m lab <arguments>` under the same budget (SIGINT, checkpoint kept), its console in beside_<i>_<time>.log and
# its results under results/ as the table's (e.g. `reproduce addition --preset packed --rows transformer ...
# --out results/addition/nope-6000-ties`); an unfinished one resumes when the next call names it again.
# ROWS_NONE=1 runs the campaigns beside alone, no table run.
set -u
export PYTHONUNBUFFERED=1
P=${PRESET:-packed-exact}; R=records/addition/$P/runs
GRAPHS=true; case "$P" in exact-isolated|isolated-offsets|same-time) GRAPHS=false;; esac
EXTRA=""; [ "$P" = same-time ] && EXTRA="records/addition/falcon-same-time/runs records/addition/isolated-offsets/runs"
W=/tmp/out_exact; mkdir -p $W
t0=$(date +%s); stamp=$(date -u +%H%M%S)
nvidia-smi --query-gpu=name --format=csv,noheader > $W/gpu.txt
pack() {  # the run records (no weights) and logs, written whole or not at all
  tar czf "$OUT/.out.tgz.part" --exclude='*.ckpt' --exclude='*.pt' --exclude='*.lock' -C $W . -C "$PWD" results \
    2>/dev/null && mv -f "$OUT/.out.tgz.part" "$OUT/out.tgz"
}
( while sleep ${SNAP_S:-60}; do pack; done ) &
snapper=$!
for src in $R $EXTRA; do
  [ -d $src ] && { python -m lab runs merge $src >> $W/merge_$stamp.log 2>&1 || tail -3 $W/merge_$stamp.log; }
done
left=$(( ${BUDGET_S:-540} - ($(date +%s) - t0) - 20 ))
rows=${ROWS:+--rows $ROWS}
start=${START_S:+--start-within $START_S}
i=0; BPIDS=""
IFS=';' read -ra BES <<< "${BESIDE:-}"
for b in "${BES[@]}"; do
  [ -z "${b// }" ] && continue
  i=$((i + 1))
  timeout --signal=INT --kill-after=40 $left python -m lab $b > $W/beside_${i}_$stamp.log 2>&1 &
  BPIDS="$BPIDS $!"
done
if [ -n "${ROWS_NONE:-}" ]; then
  :  # only the campaigns beside
elif [ -n "${ABLATE:-}" ]; then
  timeout --signal=INT --kill-after=40 $left python -m lab ablate alignment --preset $P --mixers $ABLATE \
    --gpus 1 --per-gpu ${PER_GPU:-2} --seeds ${SEEDS:-3} $start --set train.compile=true --set train.cuda_graphs=$GRAPHS \
    --out results/ablation/$P > $W/console_$stamp.log 2>&1
else
  timeout --signal=INT --kill-after=40 $left python -m lab reproduce addition --preset $P --gpus 1 \
    --per-gpu ${PER_GPU:-2} --seeds ${SEEDS:-3} $rows $start --set train.compile=true --set train.cuda_graphs=$GRAPHS \
    --out results/addition/$P > $W/console_$stamp.log 2>&1
fi
for pid in $BPIDS; do wait $pid; done
echo "campaign stopped at $(( $(date +%s) - t0 )) s"
kill $snapper 2>/dev/null; wait $snapper 2>/dev/null
pack
# a compiled run past Dynamo's recompile limit runs part of its step eagerly (records/addition/same-time, calls 13-15)
hit=$(find results/runs -name train.log -newer $W/gpu.txt -exec grep -l "recompile_limit" {} + 2>/dev/null | tr '\n' ' ')
[ -n "$hit" ] && echo "recompile limit hit in: $hit"
for f in $W/console_$stamp.log $W/beside_*_$stamp.log; do
  [ -f $f ] && { echo "== $(basename $f)"; grep -v "^step\|Warning\|warn" $f | tail -n 12; }
done
exit 0
