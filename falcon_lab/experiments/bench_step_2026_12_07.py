"""What the day's changes did to each row of the same-time table: every row's training step (`lab bench step`,
compiled, on batches from the middle of the run; `gpu_ms` the kernels' device time, which the host does not move)
and whole runs of the rows whose path changed (`lab bench throughput`: the transformer twice, the second run finding
the compiled step in the results folder's caches; falcon-1a.3; Mamba-2, now on falcon-1a's kernels)."""

from falcon_lab.experiments.declare import Commands, Experiment, smoke_sets

ROWS = ("transformer,falcon-1a.3,falcon-1.3,deltanet,retnet,falcon-3a.3,gated-deltanet,mamba2,falcon-1a.1,falcon-2a,"
        "falcon-2,falcon-3")

EXPERIMENT = Experiment(
    record="bench/step-2026-12-07",
    question="After the day's changes (packed chunks of a sample's length, falcon-3's gathers and window Gram, Mamba-2 "
             "on the kernels, the fused short convolution), what does each row's step cost, and a whole run?",
    trains=Commands(
        commands=(("bench", "step", "--preset", "same-time", "--steps", "10", "--mixers", ROWS,
                   "--set", "train.compile=true", "--out", "{out}/step"),
                  ("bench", "throughput", "--preset", "same-time", "--mixers", "transformer", "--repeat", "2",
                   "--set", "train.compile=true", "--timeout", "150", "--out", "{out}/throughput"),
                  ("bench", "throughput", "--preset", "same-time", "--mixers", "falcon-1a.3,mamba2",
                   "--set", "train.compile=true", "--timeout", "200", "--out", "{out}/throughput-recurrent")),
        table="step/step.md",
        smoke_commands=(("bench", "step", "--preset", "addition-tiny", "--steps", "2", "--mixers", "transformer,mamba2",
                         *smoke_sets(), "--out", "{out}/step"),
                        ("bench", "throughput", "--preset", "addition-tiny", "--mixers", "mamba2",
                         *smoke_sets(), "--set", "train.max_steps=4", "--out", "{out}/throughput"))),
    budget_s=1200,
    machine="one H100",
)
