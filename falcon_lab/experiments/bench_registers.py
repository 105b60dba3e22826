"""What every Triton kernel of the rules asks of an H100's registers at the same-time table's shape, read on a CPU
(`lab bench registers`: the launches intercepted, each compiled for sm_90 by the installed Triton, its registers,
spills and local loads read back): the default launches of every rule and of the short convolution, with rows of
samples by id where the rule takes them (the table's runs), same-time pairs; then falcon-2's and falcon-3's backward
kernels, which spill, at launches that may spill less (`--kernels launch=...`), for `bench-falcon2-launch` to time on
a GPU. Figures of the compiler, not times; they hold for the Triton that compiled them (named in each table).
Needs Triton's interpreter off (TRITON_INTERPRET unset), so its smoke run checks the commands alone."""

from falcon_lab.experiments.declare import Commands, Experiment

TABLE = ("--shape", "256,256,6,64", "--alignment", "same_time", "--sample-length", "40")
F2 = "f2_grad:num_warps=8;f2_fwd:BV=16;f2_dstate:num_warps=8"
F3 = "f3_grad:num_warps=8;f3_dstate:num_warps=8"

EXPERIMENT = Experiment(
    record="bench/registers",
    question="Which of the rules' Triton kernels hold every register and spill at the same-time table's shape on "
             "sm_90, and do more warps or narrower blocks stop falcon-2's and falcon-3's backward kernels spilling?",
    trains=Commands(
        commands=(("bench", "registers", *TABLE, "--out", "{out}/default"),
                  ("bench", "registers", "--rule", "falcon-2", *TABLE, "--kernels", f"launch={F2}",
                   "--out", "{out}/falcon-2-launch"),
                  ("bench", "registers", "--rule", "falcon-3", *TABLE, "--kernels", f"launch={F3}",
                   "--out", "{out}/falcon-3-launch")),
        table="default/registers.md"),
    budget_s=300,
    machine="a 2-core CPU with Triton's NVIDIA backend (no GPU)",
)
