#!/usr/bin/env bash
# The alignment ablation on MQAR at toy size, on a 2-core CPU: the mqar-tiny preset at d_model 128 (where DeltaNet
# and falcon-1a.3 learn it: ../../tasks/mqar_width), seven recurrent mixers x four cells x seeds 0-2, two runs
# at a time; then the heat maps. Three probes beside it: falcon-1a.3's RBW/shifted cell without its short
# convolutions (seeds 0 and 1, 600 steps), and with them over 1800 steps (seed 0); Gated DeltaNet and Mamba-2 in
# all four cells over 1800 steps (seed 0). Run from the repository root: bash records/ablation/mqar-d128/run.sh [RESULTS]
set -u
R=${1:-results}
export OMP_NUM_THREADS=1
python -m lab ablate alignment --task mqar \
  --mixers falcon-1a.3,deltanet,falcon-3a.3,gated-deltanet,retnet,mamba2,falcon-1.3 \
  --seeds 3 --per-gpu 2 --set model.d_model=128 --results "$R"
python -m lab plot ablation --table "$R/ablation/mqar"
for seed in 0 1; do
  python -m lab train --preset mqar-tiny --mixer falcon-1a.3 --seed $seed --set model.d_model=128 \
    --set model.mixer_options.timing=rbw --set model.mixer_options.alignment=shifted \
    --set model.mixer_options.conv=false --results "$R" --no-progress
done
python -m lab train --preset mqar-tiny --mixer falcon-1a.3 --seed 0 --set model.d_model=128 \
  --set model.mixer_options.timing=rbw --set model.mixer_options.alignment=shifted --max-steps 1800 \
  --results "$R" --no-progress
for mixer in gated-deltanet mamba2; do
  for cell in raw,same_time raw,shifted rbw,same_time rbw,shifted; do
    python -m lab train --preset mqar-tiny --mixer $mixer --seed 0 --set model.d_model=128 --max-steps 1800 \
      --set model.mixer_options.timing=${cell%,*} --set model.mixer_options.alignment=${cell#*,} \
      --results "$R" --no-progress
  done
done
