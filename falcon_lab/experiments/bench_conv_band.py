"""What two kernel changes do to the recurrent rows' steps: the short convolution's backward recomputing g at each
lag rather than handing g between threads (`falcon_lab/kernels/conv/triton_short_conv.py`), and falcon-3a's band
reading fresh rows without padded copies and adding the delayed pass's output in its own pass
(`falcon_lab/kernels/window/triton_band.py`). The rows whose q, k, v (Mamba-2's x, B, C) pass through the
convolution, with samples by id and compiled, the step profiled (each kernel's device time in its trace) and then
replayed from CUDA graphs: the same commands as `bench-samples-by-id`'s last two, whose record holds the before."""

from falcon_lab.experiments.declare import Commands, Experiment, smoke_sets

ROWS = "falcon-1a.3,falcon-1.3,falcon-3a.3,deltanet,mamba2"


def _step(folder: str, *more: str) -> tuple[str, ...]:
    return ("bench", "step", "--preset", "same-time", "--steps", "10", "--mixers", ROWS, "--samples", "by-id",
            "--set", "train.compile=true", *more, "--out", "{out}/" + folder)


EXPERIMENT = Experiment(
    record="bench/conv-band",
    question="What do the short convolution's backward recomputing g at each lag (no scratch, no barriers) and "
             "falcon-3a's band without padded copies (the delayed output added in its pass) do to the rows' steps?",
    trains=Commands(
        commands=(_step("by-id", "--traces"), _step("by-id-graphs", "--set", "train.cuda_graphs=true")),
        table="by-id/step.md",
        smoke_commands=(("bench", "step", "--preset", "addition-tiny", "--steps", "2", "--mixers", "falcon-1a.3",
                         "--samples", "by-id", *smoke_sets(), "--out", "{out}/by-id"),)),
    budget_s=300,
    machine="one H100",
)
