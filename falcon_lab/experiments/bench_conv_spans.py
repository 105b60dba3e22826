"""Which number of tiles a backward program of the short convolution loops over is fastest at the lab's shapes: the
same-time step's q, k, v (256 rows of 256 tokens, 384 channels), a long row, and the 124M model's q, k, v together.
Its backward is 0.22 ms a call in the same-time step where reading x and dy and writing dx once would take about
0.05 (`records/bench/band-fresh-rows/by-id/`: `_bwd_kernel`, 18 calls, 4.01 ms); at the default of 16 tiles a
program takes up to 16 serial steps and two programs fill an SM."""

from falcon_lab.experiments.declare import Commands, Experiment

EXPERIMENT = Experiment(
    record="bench/conv-spans",
    question="Which number of tiles a program of the short convolution's backward loops over (16, 8, 4, 2, 1) is "
             "fastest at the same-time step's, a long row's and the 124M model's shapes?",
    trains=Commands(
        commands=(("bench", "conv", "--out", "{out}"),),
        table="conv.md",
        smoke_commands=(("bench", "conv", "--smoke", "--span-tiles", "16", "--span-tiles", "1", "--out", "{out}"),)),
    budget_s=120,
    machine="one H100",
)
