"""What falcon-3a's band reading fresh rows without padded copies of the pairs, adding the delayed pass's output in its
own pass (o written once, in q's dtype) and reading the pairs in q's dtype does to its step
(`falcon_lab/kernels/window/triton_band.py`, `fused.py`): falcon-3a.3 beside falcon-1a.3 (the kernels it runs on),
samples by id, compiled, the step profiled (each kernel's device time in its trace) and then replayed from CUDA
graphs: the same commands as `bench-samples-by-id`'s last two, whose record holds the before."""

from falcon_lab.experiments.declare import Commands, Experiment, bench_step, smoke_sets

ROWS = "falcon-1a.3,falcon-3a.3"


EXPERIMENT = Experiment(
    record="bench/band-fresh-rows",
    question="What does falcon-3a's band without padded copies, with the delayed output added in its own pass, do "
             "to falcon-3a.3's step beside falcon-1a.3's?",
    trains=Commands(
        commands=(bench_step(ROWS, "by-id", "--traces", samples="by-id"),
                  bench_step(ROWS, "by-id-graphs", "--set", "train.cuda_graphs=true", samples="by-id")),
        table="by-id-graphs/step.md",
        smoke_commands=(("bench", "step", "--preset", "addition-tiny", "--steps", "2", "--mixers", "falcon-3a.3",
                         "--samples", "by-id", *smoke_sets(), "--out", "{out}/by-id-graphs"),)),
    budget_s=200,
    machine="one H100",
)
