"""The compiled training step of three mixers at the same-time regime, timed on a GPU."""

from falcon_lab.experiments.declare import Commands, Experiment, smoke_sets

EXPERIMENT = Experiment(
    record="bench/gpu-checks-2026-12-06",
    question="How long does one compiled training step of RetNet, falcon-3a.3 and Gated DeltaNet take in the "
             "same-time regime?",
    trains=Commands(
        commands=(("bench", "step", "--preset", "same-time", "--steps", "10", "--mixers",
                   "retnet,falcon-3a.3,gated-deltanet", "--set", "train.compile=true", "--out", "{out}/compiled"),),
        smoke_commands=(("bench", "step", "--preset", "tiny", "--steps", "2", "--mixers", "retnet", *smoke_sets(),
                         "--out", "{out}/compiled"),),
        table="compiled/step.md"),
    budget_s=900,
    machine="one H100",
    not_remade="the GPU tests it ran (tests/test_fla_parity.py, tests/test_packed_facts.py, the launch limit) and "
               "the falcon-3/3a profile: test runs and a profiler's output, not a lab command's",
)
