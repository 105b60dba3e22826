"""Whether falcon-2's kernels run faster with launches that spill less. Compiled for sm_90 on a CPU
(`records/bench/registers/`), `f2_grad` at its default launch (4 warps, blocks of 16 value columns) holds 255
registers a thread and spills 696 bytes of them, 72 at 8 warps; `f2_dstate` spills 32 bytes at 4 warps, none at 8. In
the same-time step on an H100, `f2_grad` took 62.8 ms of 154.7 (`records/bench/throughput-2026-12-07/step-more/`).
falcon-2's and falcon-1's fwd+bwd at the first of the kernels issue's shapes and at the same-time table's (256 rows
of 256 tokens, 6 heads of 64), at the default launches and two others (`--kernels launch=...`: no code changes), then
falcon-2's same-time step: its samples packed (as before), by id (its kernels' `SAMPLES`, no host read, no chunks
begun at every sample), by id replayed from CUDA graphs, and by id at the two other launches."""

from falcon_lab.experiments.declare import Commands, Experiment, bench_step, smoke_sets

GRAD = "f2_grad:num_warps=8"
ALL = "f2_grad:num_warps=8;f2_fwd:BV=16;f2_dstate:num_warps=8"


def _kernels(folder: str, *launch: str) -> tuple[str, ...]:
    return ("bench", "kernels", "--rule", "falcon-1", "--rule", "falcon-2", "--shape", "8,2048,12,64", "--shape",
            "256,256,6,64", "--rep", "30", *(("--kernels", f"launch={launch[0]}") if launch else ()),
            "--out", "{out}/" + folder)


EXPERIMENT = Experiment(
    record="bench/falcon2-launch",
    question="Do falcon-2's kernels get faster with launches that spill fewer registers (f2_grad at 8 warps; "
             "f2_fwd at 16 columns a block; f2_dstate at 8 warps), alone and in its same-time step, and what do "
             "its samples by id do to that step?",
    trains=Commands(
        commands=(_kernels("default"), _kernels("grad-8-warps", GRAD), _kernels("all-three", ALL),
                  bench_step("falcon-2", "step-packed", samples="packed"),
                  bench_step("falcon-2", "step-by-id", "--traces", samples="by-id"),
                  bench_step("falcon-2", "step-by-id-graphs", "--set", "train.cuda_graphs=true", samples="by-id"),
                  bench_step("falcon-2", "step-grad-8-warps", "--kernels", f"launch={GRAD}", samples="by-id"),
                  bench_step("falcon-2", "step-all-three", "--kernels", f"launch={ALL}", samples="by-id")),
        table="step-all-three/step.md",
        smoke_commands=(("bench", "step", "--preset", "addition-tiny", "--steps", "2", "--mixers", "falcon-2",
                         "--kernels", f"launch={ALL}", *smoke_sets(), "--out", "{out}/step-all-three"),)),
    budget_s=540,
    machine="one H100",
)
