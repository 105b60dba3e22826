"""The alignment ablation on running parity: three grids (the defaults, falcon-1 with ctxβ, DeltaNet with β ≤ 2)."""

from falcon_lab.experiments.declare import AlignmentGrid, Experiment

EXPERIMENT = Experiment(
    record="ablation/parity-tiny",
    question="On running parity, does the write pairing or the read timing decide which mixers learn it, and does "
             "a gain past 1 change that?",
    trains=(
        AlignmentGrid(task="parity", seeds=3, mixers=("falcon-1.3", "falcon-1a.3", "deltanet"), folder="defaults"),
        AlignmentGrid(task="parity", seeds=3, mixers=("falcon-1",), folder="falcon-1-ctxbeta",
                      overrides=("model.mixer_options.qk_norm=l2", "model.mixer_options.gain=ctx_beta")),
        AlignmentGrid(task="parity", seeds=3, mixers=("deltanet",), folder="deltanet-beta2",
                      overrides=("model.mixer_options.beta_max=2.0",)),
    ),
    budget_s=4 * 3600,
    machine="a 2-core CPU",
    not_remade="summary.md and summary.png across the three grids (summary.py at f616c0b3 under "
               "records/ablation/parity-tiny/)",
)
