"""Which form of the short convolution's kernels is fastest, alone at the lab's shapes (the same-time step's q, k, v:
256 rows of 256 tokens, 384 channels; a long row; the 124M model's q, k, v together) and inside the same-time step,
and what the UT transform's inverse by doubling and f1_grad's narrower key blocks do to falcon-1.3's step. The tiles
backward was 0.22 ms a call in the same-time step where reading x and dy and writing dx once would take about 0.05
(`records/bench/band-fresh-rows/by-id/`: `_bwd_kernel`, 18 calls, 4.01 ms): at 16 tiles a program it takes up to 16
serial steps, each behind two barriers, and two programs fill an SM. The serial backward walks tokens one by one with
no barrier, a thread a channel; its programs may walk 1, 2 or 4 spans in step (more reads in flight). (The record was
made when a serial forward stood beside it, `conv=serial` setting both: that forward was slower and is gone.)"""

from falcon_lab.experiments.declare import Commands, Experiment, bench_step


def _step(name: str, mixers: str, *kernels: str) -> tuple[str, ...]:
    return bench_step(mixers, "step-" + name, "--set", "train.cuda_graphs=true",
                      *(w for k in kernels for w in ("--kernels", k)), samples="by-id")


EXPERIMENT = Experiment(
    record="bench/conv-forms",
    question="Which form of the short convolution's kernels, tiles or serial, is fastest forward and backward alone "
             "and in the same-time step, and what do the inverse by doubling and f1_grad at BK = 32 do there?",
    trains=Commands(
        commands=(("bench", "conv", "--out", "{out}"),
                  _step("tiles", "falcon-1a.3,falcon-1.3", "conv=tiles", "inverse=substitution"),
                  _step("serial", "falcon-1a.3,falcon-1.3", "conv=serial", "inverse=substitution"),
                  _step("serial-doubling", "falcon-1.3", "conv=serial", "inverse=doubling"),
                  _step("serial-doubling-grad32", "falcon-1.3", "conv=serial", "inverse=doubling",
                        "launch=f1_grad:BK=32"),
                  _step("default", "falcon-1a.3,falcon-1.3")),
        table="conv.md",
        smoke_commands=(("bench", "conv", "--smoke", "--span-tiles", "2", "--serial-span", "16", "--out",
                         "{out}"),)),
    budget_s=480,
    machine="one H100",
)
