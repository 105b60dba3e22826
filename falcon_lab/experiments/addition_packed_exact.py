"""The packed-exact table: exact digit positions, rows packed with whole samples: which rows fit widths 1-32."""

from falcon_lab.experiments.declare import AdditionTable, Experiment

EXPERIMENT = Experiment(
    record="addition/packed-exact",
    question="Which rows of the addition table fit widths 1-32 with exact digit positions and packed rows?",
    trains=AdditionTable(preset="packed-exact", seeds=3),
    budget_s=6 * 3600,
    machine="one H200",
    gpu_settings=("train.compile=true", "train.cuda_graphs=true"),
    not_remade="losses.png (losses.py at f616c0b3 under records/addition/packed-exact/)",
)
