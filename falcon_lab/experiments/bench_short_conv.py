"""What the short convolution's backward costs in the recurrent rows' steps once it recomputes g at each lag rather
than handing g between threads (`falcon_lab/kernels/conv/triton_short_conv.py`): the rows whose q, k, v (Mamba-2's
x, B, C) pass through it, with samples by id and compiled, the step profiled (each kernel's device time in its
trace) and then replayed from CUDA graphs: the same commands as `bench-samples-by-id`'s last two, whose record holds
the backward before."""

from falcon_lab.experiments.declare import Commands, Experiment, smoke_sets

ROWS = "falcon-1a.3,falcon-1.3,deltanet,mamba2"


def _step(folder: str, *more: str) -> tuple[str, ...]:
    return ("bench", "step", "--preset", "same-time", "--steps", "10", "--mixers", ROWS, "--samples", "by-id",
            "--set", "train.compile=true", *more, "--out", "{out}/" + folder)


EXPERIMENT = Experiment(
    record="bench/short-conv",
    question="How much of the recurrent rows' step does the short convolution's backward take once it recomputes g "
             "at each lag instead of passing it between threads through scratch memory and barriers?",
    trains=Commands(
        commands=(_step("by-id", "--traces"), _step("by-id-graphs", "--set", "train.cuda_graphs=true")),
        table="by-id/step.md",
        smoke_commands=(("bench", "step", "--preset", "addition-tiny", "--steps", "2", "--mixers", "falcon-1a.3",
                         "--samples", "by-id", *smoke_sets(), "--out", "{out}/by-id"),)),
    budget_s=300,
    machine="one H100",
)
