"""What a run of the same-time table costs on one GPU: the training step's anatomy of every row (`lab bench step`,
profiled, batches from the middle of the run) and whole runs from process start to exit (`lab bench throughput`:
the transformer twice, the second run finding the compiled step in the results folder's caches, falcon-1a.3 and
falcon-1.3)."""

from falcon_lab.experiments.declare import Commands, Experiment, smoke_sets

ROWS = "transformer,falcon-1a.3,falcon-1.3,retnet"
MORE_ROWS = "deltanet,falcon-3a.3,gated-deltanet,mamba2,falcon-1a.1,falcon-2,falcon-3,falcon-2a"

EXPERIMENT = Experiment(
    record="bench/throughput-2026-12-07",
    question="How long does a run of the same-time table take on one GPU, where does a step's time go, and how "
             "near is each row to a run a minute?",
    trains=Commands(
        commands=(("bench", "step", "--preset", "same-time", "--steps", "10", "--mixers", ROWS,
                   "--set", "train.compile=true", "--traces", "--out", "{out}/step"),
                  ("bench", "throughput", "--preset", "same-time", "--mixers", "transformer", "--repeat", "2",
                   "--set", "train.compile=true", "--timeout", "150", "--out", "{out}/throughput"),
                  ("bench", "throughput", "--preset", "same-time", "--mixers", "falcon-1a.3",
                   "--set", "train.compile=true", "--timeout", "200", "--out", "{out}/throughput-falcon-1a.3"),
                  ("bench", "step", "--preset", "same-time", "--steps", "10", "--mixers", MORE_ROWS,
                   "--set", "train.compile=true", "--out", "{out}/step-more"),
                  ("bench", "throughput", "--preset", "same-time", "--mixers", "falcon-1.3",
                   "--set", "train.compile=true", "--timeout", "200", "--out", "{out}/throughput-falcon-1.3")),
        table="throughput/throughput.md",
        smoke_commands=(("bench", "step", "--preset", "addition-tiny", "--steps", "2", "--mixers", "transformer",
                         *smoke_sets(), "--out", "{out}/step"),
                        ("bench", "throughput", "--preset", "addition-tiny", "--mixers", "transformer",
                         *smoke_sets(), "--set", "train.max_steps=4", "--out", "{out}/throughput"))),
    budget_s=1200,
    machine="one H100",
)
