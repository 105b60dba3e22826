"""Running parity on lengths 1-40 at d_model 128: bound 2 and bound 1 beside it, three seeds."""

from falcon_lab.experiments.declare import Experiment, Row, RunGrid
from falcon_lab.experiments.tasks_beta_parity_40 import PARITY_40

D128 = (*PARITY_40, "model.d_model=128", "train.val_every=500", "train.ckpt_every=500")

EXPERIMENT = Experiment(
    record="tasks/beta/parity-40/d128",
    question="At d_model 128, does bound 2 still let falcon-1.3, falcon-1 (ctxβ) and DeltaNet learn running "
             "parity where bound 1 does not?",
    trains=RunGrid(task="parity", preset="parity-tiny", seeds=3, overrides=D128, rows=(
        Row("falcon-1.3 eta_max=2", "falcon-1.3", ("model.mixer_options.eta_max=2.0",)),
        Row("falcon-1 ctxβ beta_max=2", "falcon-1", ("model.mixer_options.qk_norm=l2",
                                                     "model.mixer_options.gain=ctx_beta",
                                                     "model.mixer_options.beta_max=2.0")),
        Row("deltanet beta_max=2", "deltanet", ("model.mixer_options.beta_max=2.0",)),
        Row("falcon-1.3 eta_max=1", "falcon-1.3", ("model.mixer_options.eta_max=1.0",)),
        Row("deltanet beta_max=1", "deltanet", ("model.mixer_options.beta_max=1.0",)))),
    budget_s=6 * 3600,
    machine="a 2-core CPU",
    not_remade="the eigenvalue census and lengths.png (records/tasks/beta/study.py)",
)
