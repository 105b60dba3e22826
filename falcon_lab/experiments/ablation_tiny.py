"""The alignment ablation at CPU size: timing RAW/RBW x write pairing shifted/same-time on the tiny addition preset."""

from falcon_lab.experiments.declare import AlignmentGrid, Experiment

EXPERIMENT = Experiment(
    record="ablation/tiny",
    question="How do timing (RAW/RBW) and write pairing (shifted/same-time) move each recurrent mixer on tiny "
             "addition?",
    trains=AlignmentGrid(task="addition", preset="tiny", seeds=1),
    budget_s=3 * 3600,
    machine="a 2-core CPU",
)
