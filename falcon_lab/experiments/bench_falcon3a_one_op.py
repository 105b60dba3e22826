"""What running falcon-3a's delayed pass and band as one op does (`_DelayedBand` in `falcon_lab/kernels/window/
fused.py`): backward, the band's kernel writes its dq, dx, dv and the delayed pass's kernels add theirs into them,
where autograd summed the two ops' bf16 gradients after (0.88 ms of falcon-3a.3's profiled same-time step in 18
launches on an H100, `records/bench/falcon3a-delay/`). falcon-3a.3's step beside falcon-1a.3's, profiled and
graphed, and falcon-3a's fwd+bwd beside falcon-1a's: `bench-falcon3a-delay`'s commands, whose record holds the
before."""

from falcon_lab.experiments import bench_falcon3a_delay
from falcon_lab.experiments.declare import Experiment

EXPERIMENT = Experiment(
    record="bench/falcon3a-one-op",
    question="With falcon-3a's two passes as one op and no sums of their gradients, what do falcon-3a.3's step "
             "and falcon-3a's fwd+bwd take beside falcon-1a's?",
    trains=bench_falcon3a_delay.EXPERIMENT.trains,
    budget_s=420,
    machine="one H100",
)
