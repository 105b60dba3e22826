"""Running parity on lengths 1-40 (41-256 held out): the gain's bound 1 against 2 for the delta-rule mixers."""

from falcon_lab.experiments.declare import Experiment, Row, RunGrid

PARITY_40 = ("model.d_model=64", "data.lengths=[1,40]", "data.test_lengths=[41,256]", "train.max_steps=1500",
             "train.val_every=250", "train.ckpt_every=250")


def rows(bound: float) -> tuple[Row, ...]:
    """The rows at one bound on the step size (Falcon rules: eta_max) or the gain (falcon-1 with ctxβ, DeltaNet)."""
    return (Row(f"falcon-1.3 eta_max={bound:g}", "falcon-1.3", (f"model.mixer_options.eta_max={bound}",)),
            Row(f"falcon-1 ctxβ beta_max={bound:g}", "falcon-1", ("model.mixer_options.qk_norm=l2",
                                                                  "model.mixer_options.gain=ctx_beta",
                                                                  f"model.mixer_options.beta_max={bound}")),
            Row(f"deltanet beta_max={bound:g}", "deltanet", (f"model.mixer_options.beta_max={bound}",)),
            Row(f"falcon-1a.3 eta_max={bound:g}", "falcon-1a.3", (f"model.mixer_options.eta_max={bound}",)))


EXPERIMENT = Experiment(
    record="tasks/beta/parity-40",
    question="Does letting the transition's eigenvalues go negative (a bound of 2 instead of 1) let the delta-rule "
             "mixers learn running parity and hold it past the trained lengths?",
    trains=RunGrid(task="parity", preset="parity-tiny", seeds=3, overrides=PARITY_40, rows=(*rows(1.0), *rows(2.0))),
    budget_s=6 * 3600,
    machine="a 2-core CPU",
    not_remade="the eigenvalue census and lengths.png (records/tasks/beta/study.py)",
)
