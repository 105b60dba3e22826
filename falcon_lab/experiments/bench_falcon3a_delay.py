"""What reading falcon-3a's delayed pairs where they lie does (`decayed_attention(..., delay=W − 1)`: the falcon-1a
kernels read k and v W − 1 tokens back and write their gradients there, where the glue made moved copies of both
forward and moved their gradients back: in falcon-3a.3's profiled same-time step on an H100 the copies' kernel
took 1.62 ms (12 calls) and the two fused kernels that hold the slices' gradients 2.08 ms,
`records/bench/band-fresh-rows/by-id/`; and its dk is written once in k's dtype, not cast from float32 after).
falcon-3a.3's step beside falcon-1a.3's, profiled and graphed (the commands of `bench-band-fresh-rows`, whose record
holds the before), and falcon-3a's fwd+bwd beside falcon-1a's (`bench-falcon3a-fresh-rows`' command: issue 68's
target, ≤ 1.5×)."""

from falcon_lab.experiments import bench_band_fresh_rows
from falcon_lab.experiments.declare import Commands, Experiment

BAND = bench_band_fresh_rows.EXPERIMENT.trains  # the before's step commands, run again

EXPERIMENT = Experiment(
    record="bench/falcon3a-delay",
    question="With the delayed pairs read where they lie, what do falcon-3a.3's step and falcon-3a's fwd+bwd take "
             "beside falcon-1a's?",
    trains=Commands(
        commands=(*BAND.commands, ("bench", "kernels", "--rule", "falcon-1a", "--rule", "falcon-3a", "--rep", "30",
                                   "--out", "{out}/kernels")),
        table=BAND.table, smoke_commands=BAND.smoke_commands),
    budget_s=420,
    machine="one H100",
)
