"""What compiling falcon-3's glue for fresh sequences does (`falcon_lab/kernels/window/fused.py`: the pairs, their
window Grams, the step sizes and the window slots as two compiled graphs around the eigenvalues' Triton kernel, where
they ran as eager PyTorch: in falcon-3's profiled same-time step on an H100 the step took 134.5 ms of device time in
4,701 launches, its own kernels (f3_*) 46.9 ms of it, `records/bench/step-2026-12-07/rows-68d0f026/`). falcon-3's
step (packed samples, laid one to a row in four runs of like lengths), profiled, and its fwd+bwd beside falcon-1's
(issue 68's target: falcon-3 (B = 4) over falcon-1 (λ > 0) ≤ 3; 4.7, 6.0 and 5.3 at the three shapes in
`records/bench/kernels-2026-12-05/`)."""

from falcon_lab.experiments.declare import Commands, Experiment, bench_step, smoke_sets

EXPERIMENT = Experiment(
    record="bench/falcon3-fresh-glue",
    question="With falcon-3's glue for fresh sequences compiled, what do its same-time step and its fwd+bwd beside "
             "falcon-1's take?",
    trains=Commands(
        commands=(bench_step("falcon-3", "step", "--traces"),
                  ("bench", "kernels", "--rule", "falcon-1", "--rule", "falcon-3", "--rep", "30", "--out",
                   "{out}/kernels")),
        table="step/step.md",
        smoke_commands=(("bench", "step", "--preset", "addition-tiny", "--steps", "2", "--mixers", "falcon-3",
                         *smoke_sets(), "--out", "{out}/step"),)),
    budget_s=480,
    machine="one H100",
)
