"""falcon-3a's fwd+bwd beside falcon-1a's once fresh sequences with outputs alone (a model's forward, and `lab bench
kernels`' call) run on the form for fresh sequences, its glue compiled on the GPU, rather than on the stateful form's
~180 eager launches (`records/bench/falcon3a-glue/`: 5.46, 5.50 and 2.92 times falcon-1a's wall clock)."""

from falcon_lab.experiments.declare import Commands, Experiment

EXPERIMENT = Experiment(
    record="bench/falcon3a-fresh-rows",
    question="With fresh sequences on the compiled glue, how far is falcon-3a's fwd+bwd from falcon-1a's (target "
             "≤ 1.5×)?",
    trains=Commands(
        commands=(("bench", "kernels", "--rule", "falcon-1a", "--rule", "falcon-3a", "--rep", "30", "--out",
                   "{out}"),),
        table="kernels.md"),
    budget_s=300,
    machine="one H100",
)
