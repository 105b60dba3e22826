"""One run at a time on a GPU at the paper's addition setting, compiled and captured in a CUDA graph: its wall time."""

from falcon_lab.experiments.declare import Experiment, Row, RunGrid

EXPERIMENT = Experiment(
    record="addition/single-compile-cuda-graphs",
    question="How long does one 2000-step run of the paper's addition setting take alone on a GPU, compiled and "
             "replayed as a CUDA graph?",
    trains=RunGrid(task="addition", preset="addition-paper", seeds=1,
                   rows=(Row("falcon-1a.3", "falcon-1a.3"), Row("falcon-1.3", "falcon-1.3"))),
    budget_s=600,
    machine="one H200, one run at a time (--devices 1)",
    gpu_settings=("train.compile=true", "train.cuda_graphs=true"),
    not_remade="the split of each run's wall time (evaluation, compilation and capture, median step) read from "
               "its metrics.csv in the record's README",
)
