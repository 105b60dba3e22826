"""falcon-3a's kernels beside falcon-1a's on a GPU: the time around the kernels themselves."""

from falcon_lab.experiments.declare import Commands, Experiment

EXPERIMENT = Experiment(
    record="bench/falcon3a-glue",
    question="How much of falcon-3a's time is spent outside its kernels, beside falcon-1a's?",
    trains=Commands(
        commands=(("bench", "kernels", "--rule", "falcon-3a", "--rule", "falcon-1a", "--out",
                   "{out}/h100-2026-12-06"),),
        table="h100-2026-12-06/kernels.md"),
    budget_s=900,
    machine="one H100",
    not_remade="the count of ATen operations and bytes around falcon-3a's kernels (count.py at f616c0b3 under "
               "records/bench/falcon3a-glue/, on a CPU under TRITON_INTERPRET=1) and the profile",
)
