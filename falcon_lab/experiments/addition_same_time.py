"""The same-time table: every row of the addition table in the first regime where Falcon rows fit widths 1-32 and
answer past them (samples apart, half with digit indices offset, Falcon rows with same-time writes, no output gate,
no ridge)."""

from falcon_lab.experiments.declare import AdditionTable, Experiment

EXPERIMENT = Experiment(
    record="addition/same-time",
    question="Which rows fit addition widths 1-32 and how far do they answer past them, in the same-time regime?",
    trains=AdditionTable(preset="same-time", seeds=3),
    budget_s=6 * 3600,
    machine="one H200",
    gpu_settings=("train.compile=true", "train.cuda_graphs=false"),
    not_remade="digits.csv, reach.csv, losses.png and the regimes' comparison (scripts at f616c0b3 under "
               "records/addition/same-time/)",
)
