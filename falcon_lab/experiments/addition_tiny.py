"""The tiny addition table: the transformer and falcon-1.3 on a CPU, widths 1-6 trained, 7-10 held out."""

from falcon_lab.experiments.declare import AdditionTable, Experiment

EXPERIMENT = Experiment(
    record="addition/tiny",
    question="Does the table's pipeline show rows learning addition on a CPU in minutes, and where they stop?",
    trains=AdditionTable(preset="tiny", seeds=2),
    budget_s=3600,
    machine="a 2-core CPU",
)
