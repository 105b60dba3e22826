#!/usr/bin/env bash
# Device call: the language-model track on one H200 (issue 28). Six mixers (MIXERS) at one size (D_MODEL x LAYERS,
# heads of 64; 6 x 512 is 45.0M parameters for the transformer to 51.4M for Gated DeltaNet, with the GPT-2
# embedding) trained side by side on the Debian documentation corpus (`lab data debian-docs`, both corpora: 10.2M
# train tokens, 200k val; carry data/debian-docs), rows of 1024 tokens, BATCH rows a step, STEPS steps (default
# 300 x 32 x 1024 = 9.8M tokens, about one pass),
# compiled, bf16; then each run's validation perplexity on the whole val shard (`lab eval ppl`), and the training
# step's time for every mixer alone at 1K and 4K context with the same tokens a step (`lab bench step`, compiled
# where BENCH_COMPILE=true, default COMPILE). Writes $OUT/lm.tgz and prints a table. The phases' limits: TRAIN_S,
# PPL_S (also the last-word scoring's), BENCH_S (each context). With DATA/last_words_val.jsonl (`lab data last-words
# --data data/debian-docs --tokenizer data/gpt2.tiktoken`) and data/gpt2.tiktoken carried, each run is also scored
# on LAMBADA-style last words (`lab eval lambada`). JOBS runs train at once (default 3: six 45M runs at 32K tokens
# a step need about 200 GB of the H200's 140, and four of six failed at step 0 out of memory at JOBS=6); TRAIN_S
# bounds each run.
#   LAB_COMMIT=<sha> STEPS=300 TRAIN_S=115 PPL_S=30 BENCH_S=60 BENCH_COMPILE=false BENCH_STEPS=5 JOBS=3 \
#     bash records/device/lm_gpu.sh                     (carry data/debian-docs and data/gpt2.tiktoken)
# On a CPU, to check the script: DEVICE=cpu D_MODEL=64 LAYERS=2 BATCH=2 STEPS=4 COMPILE=false SEQ=128 ...
set -u
export PYTHONUNBUFFERED=1 OMP_NUM_THREADS=2 PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
JOBS=${JOBS:-3}
OUT=${OUT:-/tmp/lm-out}; mkdir -p "$OUT"
W=${W:-/tmp/lm}; rm -rf $W; mkdir -p $W
MIXERS=${MIXERS:-transformer mamba2 deltanet gated-deltanet falcon-1a.3 falcon-3a.3}
D_MODEL=${D_MODEL:-512}; LAYERS=${LAYERS:-6}; BATCH=${BATCH:-32}; STEPS=${STEPS:-300}; SEQ=${SEQ:-1024}
COMPILE=${COMPILE:-true}; TRAIN_S=${TRAIN_S:-200}; PPL_S=${PPL_S:-60}; BENCH_S=${BENCH_S:-150};
BENCH_COMPILE=${BENCH_COMPILE:-$COMPILE}; DATA=${DATA:-data/debian-docs}
SIZE="--set model.d_model=$D_MODEL --set model.n_layers=$LAYERS --set model.n_heads=$(( D_MODEL / 64 ))"
[ "$D_MODEL" -lt 64 ] && SIZE="--set model.d_model=$D_MODEL --set model.n_layers=$LAYERS --set model.n_heads=2"
EXTRA=""; [ "${DEVICE:-cuda}" = cpu ] && EXTRA="--set train.precision=32-true"
t0=$(date +%s)
for m in $MIXERS; do
  while [ "$(jobs -rp | wc -l)" -ge "$JOBS" ]; do wait -n; done
  timeout --signal=INT --kill-after=20 $TRAIN_S python -m lab train --task fineweb --preset fineweb-124m --mixer $m \
    $SIZE --set data.path=$DATA --set data.seq_len=$SEQ --set train.batch_size=$BATCH --set train.max_steps=$STEPS \
    --set optim.warmup_steps=$(( STEPS / 10 )) --set train.val_every=$(( STEPS / 2 )) --set train.ckpt_every=$(( STEPS / 2 )) \
    --set train.log_every=10 --set data.val_windows=64 --set train.compile=$COMPILE $EXTRA --no-progress \
    --out $W/runs/$m --results $W/res > $W/train-$m.log 2>&1 &
done
wait
echo "training: $(( $(date +%s) - t0 )) s"
for m in $MIXERS; do  # every run with a checkpoint, side by side
  [ -f $W/runs/$m/run.json ] && grep -q '"finished"' $W/runs/$m/run.json || echo "$m: not finished"
  timeout $PPL_S python -m lab eval ppl --run $W/runs/$m --batch-size 16 > $W/ppl-$m.log 2>&1 &
done
wait
# last-word accuracy on LAMBADA-style passages of the val shard (`lab data last-words`, made before the call and
# carried in the data folder), when the file and the tokenizer are there
LASTWORD=${LASTWORD:-$DATA/last_words_val.jsonl}; TOK=${TOK:-data/gpt2.tiktoken}
if [ -f "$LASTWORD" ] && [ -f "$TOK" ]; then
  for m in $MIXERS; do
    timeout $PPL_S python -m lab eval lambada --run $W/runs/$m --file $LASTWORD --tokenizer $TOK --batch-size 16 \
      > $W/lastword-$m.log 2>&1 &
  done
  wait
else
  echo "last-word accuracy: skipped ($LASTWORD or $TOK missing)"
fi
echo "perplexity: $(( $(date +%s) - t0 )) s"
# the step's time alone, 1K and 4K context, the same tokens a step
for ctx in $SEQ $(( SEQ * 4 )); do
  timeout --kill-after=10 $BENCH_S python -m lab bench step --task random --preset small \
    --mixers "$(echo $MIXERS | tr ' ' ,)" $SIZE --set data.seq_len=$ctx --set data.vocab_size=50304 \
    --set train.batch_size=$(( BATCH * SEQ / ctx )) --set train.compile=$BENCH_COMPILE $EXTRA --steps ${BENCH_STEPS:-10} \
    --out $W/bench-$ctx > $W/bench-$ctx.log 2>&1 || echo "bench at $ctx: rc $?"
done
echo "bench: $(( $(date +%s) - t0 )) s"
(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null || echo cpu) > $W/gpu.txt
tar czf "$OUT/lm.tgz" --exclude='checkpoints' --exclude='*.pt' --exclude='*.ckpt' --exclude='*.lock' -C $W .
python - "$W" <<'PY'
import csv, json, os, sys
W = sys.argv[1]
print("| mixer | params | status | steps | train loss | val ppl | last-word acc. | tok/s (JOBS at once) |")
print("|---|---|---|---|---|---|---|---|")
for m in os.environ.get("MIXERS", "transformer mamba2 deltanet gated-deltanet falcon-1a.3 falcon-3a.3").split():
    run = os.path.join(W, "runs", m)
    try:
        info = json.load(open(os.path.join(run, "run.json")))
    except OSError:
        print(f"| {m} | | missing | | | | | |"); continue
    prov = json.load(open(os.path.join(run, "provenance.json"))) if os.path.exists(os.path.join(run, "provenance.json")) else {}
    ppl = json.load(open(os.path.join(run, "perplexity.json"))) if os.path.exists(os.path.join(run, "perplexity.json")) else {}
    lw = json.load(open(os.path.join(run, "lambada.json"))) if os.path.exists(os.path.join(run, "lambada.json")) else {}
    acc = next((f"{r['accuracy']:.1f} ({r['correct']}/{r['examples']})" for r in lw.values()), "")
    val = next((f"{r['ppl']:.2f}" for r in ppl.values() if isinstance(r, dict) and "ppl" in r), "")
    met = info.get("metrics") or {}
    print(f"| {m} | {prov.get('n_params', '')} | {info['status']} | {info.get('steps')} | {met.get('loss', '')} | "
          f"{val} | {acc} | {met.get('tokens_per_s', '')} |")
for f in sorted(os.listdir(W)):
    if f.startswith("bench-") and os.path.isdir(os.path.join(W, f)) and os.path.exists(os.path.join(W, f, "step.md")):
        print(f"\n{f}:"); print(open(os.path.join(W, f, "step.md")).read())
PY
