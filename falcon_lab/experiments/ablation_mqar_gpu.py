"""The alignment ablation on MQAR at d_model 128 over 1800 steps, seven recurrent mixers, three seeds."""

from falcon_lab.experiments.declare import AlignmentGrid, Experiment

EXPERIMENT = Experiment(
    record="ablation/mqar-gpu",
    question="On MQAR, how do timing (RAW/RBW) and write pairing (shifted/same-time) move each recurrent mixer "
             "given 1800 steps?",
    trains=AlignmentGrid(task="mqar", seeds=3, max_steps=1800, overrides=("model.d_model=128",), mixers=(
        "falcon-1a.3", "falcon-3a.3", "falcon-1.3", "deltanet", "gated-deltanet", "retnet", "mamba2")),
    budget_s=3600,
    machine="one GPU, many runs sharing it (--per-gpu 14)",
)
