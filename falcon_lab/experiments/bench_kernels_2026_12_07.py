"""Issue 68's measurement: every rule's Triton kernel beside fla's at the three shapes, each ratio against its target
beside the 2026-12-05 run's (`targets.md`), and every rule's forward and gradients held to its float64 chunk form on
the GPU at the same three shapes (`gpu-check/`). fla must be installed on the machine (its wheels, fla-core and
flash-linear-attention 0.5.2, carried: the device has no index to install from)."""

from falcon_lab.experiments.declare import Commands, Experiment

BEFORE = "records/bench/kernels-2026-12-05"
SHAPES = ("8,2048,12,64", "4,4096,16,128", "1,16384,16,128")

EXPERIMENT = Experiment(
    record="bench/kernels-2026-12-07",
    question="How near fla and their targets are the rules' kernels at the three shapes, and does every rule's "
             "forward and gradient hold to float64 there on the GPU?",
    trains=Commands(
        commands=(("bench", "kernels", "--rep", "50", "--against", f"{BEFORE}/kernels.csv", "--against",
                   f"{BEFORE}/d128/kernels.csv", "--out", "{out}"),
                  ("bench", "gpu-check", "--rules", "all", *(w for s in SHAPES for w in ("--check-shape", s)),
                   "--no-sweeps", "--no-fla", "--out", "{out}/gpu-check")),
        table="targets.md",
        smoke_commands=(("bench", "targets", f"{BEFORE}/kernels.csv", f"{BEFORE}/d128/kernels.csv", "--out",
                         "{out}"),
                        ("bench", "gpu-check", "--smoke", "--no-sweeps", "--rules", "falcon-1a", "--out",
                         "{out}/gpu-check"))),
    budget_s=1500,
    machine="one H100 with fla 0.5.2",
)
