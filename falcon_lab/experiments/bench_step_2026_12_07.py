"""What the day's changes did to each row of the same-time table's training step (`lab bench step`, compiled, on
batches from the middle of the run): `loop_ms` the bare loop, `gpu_ms` the kernels' device time (which the host
does not move: on these small models the loop is often the host's launching, and hosts differ between calls)."""

from falcon_lab.experiments.declare import Commands, Experiment, smoke_sets

ROWS = ("transformer,falcon-1a.3,falcon-1.3,deltanet,retnet,falcon-3a.3,gated-deltanet,mamba2,falcon-1a.1,falcon-2a,"
        "falcon-2,falcon-3")

EXPERIMENT = Experiment(
    record="bench/step-2026-12-07",
    question="After the day's changes (packed chunks of a sample's length, falcon-3's gathers and window Gram, Mamba-2 "
             "on the kernels, falcon-3a's compiled glue, the fused short convolution), what does each row's step "
             "cost?",
    trains=Commands(
        commands=(("bench", "step", "--preset", "same-time", "--steps", "10", "--mixers", ROWS,
                   "--set", "train.compile=true", "--out", "{out}/step"),),
        table="step/step.md",
        smoke_commands=(("bench", "step", "--preset", "addition-tiny", "--steps", "2", "--mixers", "transformer,mamba2",
                         *smoke_sets(), "--out", "{out}/step"),)),
    budget_s=600,
    machine="one H100",
)
