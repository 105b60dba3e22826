"""Whether isolated samples taken by their ids make the recurrent rows' steps cheaper: every row whose kernels take
them (`--samples by-id`: the rows as they are, in full chunks, no host read) beside the same rows with their samples
as packed sequences (`--samples packed`, the default so far), then by id with the step replayed from CUDA graphs
(`train.cuda_graphs`, which packed samples refuse). `lab bench step`, compiled, batches from the middle of the run."""

from falcon_lab.experiments.declare import Commands, Experiment, bench_step, smoke_sets

ROWS = "falcon-1a.3,falcon-1.3,falcon-3a.3,deltanet,retnet,mamba2"


EXPERIMENT = Experiment(
    record="bench/samples-by-id",
    question="Do the recurrent rows' steps get cheaper when their isolated samples reach the kernels by id (no host "
             "read, fixed shapes) rather than as packed sequences, and again when that step replays from CUDA graphs?",
    trains=Commands(
        commands=(bench_step(ROWS, "packed", samples="packed"), bench_step(ROWS, "by-id", "--traces", samples="by-id"),
                  bench_step(ROWS, "by-id-graphs", "--set", "train.cuda_graphs=true", samples="by-id")),
        table="by-id/step.md",
        smoke_commands=(("bench", "step", "--preset", "addition-tiny", "--steps", "2", "--mixers", "falcon-1a.3",
                         "--samples", "by-id", *smoke_sets(), "--out", "{out}/by-id"),)),
    budget_s=600,
    machine="one H100",
)
