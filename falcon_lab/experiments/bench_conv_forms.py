"""Which form of the short convolution's kernels is fastest at the lab's shapes, and at which launch: the same-time
step's q, k, v (256 rows of 256 tokens, 384 channels), a long row, and the 124M model's q, k, v together. The tiles
form was 0.22 ms a call in the same-time step where reading x and dy and writing dx once would take about 0.05
(`records/bench/band-fresh-rows/by-id/`: `_bwd_kernel`, 18 calls, 4.01 ms): at 16 tiles a program it takes up to 16
serial steps, each behind two barriers, and two programs fill an SM. The serial form walks tokens one by one with
no barrier, a thread a channel, its reads issued tokens ahead (forward and backward)."""

from falcon_lab.experiments.declare import Commands, Experiment

EXPERIMENT = Experiment(
    record="bench/conv-forms",
    question="Which form of the short convolution's kernels, tiles (backward: 16, 4 or 1 a program) or serial (32, "
             "64 or 128 tokens a program, 64 or 128 channels), is fastest forward and backward at the same-time "
             "step's, a long row's and the 124M model's shapes?",
    trains=Commands(
        commands=(("bench", "conv", "--out", "{out}"),),
        table="conv.md",
        smoke_commands=(("bench", "conv", "--smoke", "--span-tiles", "2", "--serial-span", "16", "--out",
                         "{out}"),)),
    budget_s=150,
    machine="one H100",
)
