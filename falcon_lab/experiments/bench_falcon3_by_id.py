"""What falcon-3's rows of samples by id do to its step (`triton_falcon3_samples`, `SAMPLES` in
`falcon_lab/kernels/window/triton_falcon3*.py`): each token's window slots hold the pairs of its own sample and the
chunk kernels restart at each sample, where the packed samples went one to a row in four runs of like lengths
(gathered there and back, each run its own prepare and launches: 4,701 launches and 134.5 ms of device time in the
profiled step on an H100, `records/bench/step-2026-12-07/rows-68d0f026/`). falcon-3's same-time step packed and by
id, compiled and profiled, then by id replayed from CUDA graphs (which packed samples cannot take); falcon-1.3 by id
beside it, the kernels issue's yardstick (falcon-3 / falcon-1 ≤ 3); and falcon-3 by id with the glue around its
eigenvalue kernel compiled for the rows' shape (`--kernels falcon3-glue=compiled`), profiled and graphed; and by id,
graphed, with `f3_grad` and `f3_dstate` at 8 warps, where they spill 24 and 0 bytes a thread against 480 and 64 at
4 (`records/bench/registers/`)."""

from falcon_lab.experiments.declare import Commands, Experiment, bench_step, smoke_sets

ROWS = "falcon-1.3,falcon-3"
COMPILED = "falcon3-glue=compiled"

EXPERIMENT = Experiment(
    record="bench/falcon3-by-id",
    question="With its samples by id, what does falcon-3's same-time step take beside its packed rows and "
             "falcon-1.3's?",
    trains=Commands(
        commands=(bench_step("falcon-3", "packed", "--traces", samples="packed"),
                  bench_step(ROWS, "by-id", "--traces", samples="by-id"),
                  bench_step(ROWS, "by-id-graphs", "--set", "train.cuda_graphs=true", samples="by-id"),
                  bench_step("falcon-3", "glue-compiled", "--traces", "--kernels", COMPILED, samples="by-id"),
                  bench_step("falcon-3", "glue-compiled-graphs", "--set", "train.cuda_graphs=true", "--kernels",
                             COMPILED, samples="by-id"),
                  bench_step("falcon-3", "by-id-graphs-8-warps", "--set", "train.cuda_graphs=true", "--kernels",
                             "launch=f3_grad:num_warps=8;f3_dstate:num_warps=8", samples="by-id")),
        table="by-id-graphs/step.md",
        smoke_commands=(("bench", "step", "--preset", "addition-tiny", "--steps", "2", "--mixers", "falcon-3",
                         "--samples", "by-id", *smoke_sets(), "--out", "{out}/by-id-graphs"),)),
    budget_s=480,
    machine="one H100",
)
