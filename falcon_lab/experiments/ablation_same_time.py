"""The alignment ablation in the same-time regime of the addition table."""

from falcon_lab.experiments.declare import AlignmentGrid, Experiment

EXPERIMENT = Experiment(
    record="ablation/same-time",
    question="In the same-time regime, how do timing (RAW/RBW) and write pairing (shifted/same-time) move each "
             "recurrent mixer on addition?",
    trains=AlignmentGrid(task="addition", preset="same-time", seeds=3),
    budget_s=12 * 3600,
    machine="one H200",
    gpu_settings=("train.compile=true", "train.cuda_graphs=false"),
)
