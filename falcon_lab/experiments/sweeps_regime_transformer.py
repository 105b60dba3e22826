"""The transformer's training regime on addition at the paper's protocol: a 40-trial TPE sweep."""

from falcon_lab.experiments.declare import Commands, Experiment

EXPERIMENT = Experiment(
    record="sweeps/regime-transformer",
    question="Which learning rate, batch, width, depth and schedule let the transformer learn addition's tokens "
             "best?",
    trains=Commands(
        commands=(("sweep", "run", "regime", "--trials", "40", "--workers", "8", "--study", "regime-transformer",
                   "--objective", "val_token_acc", "--sampler", "tpe", "--pruner", "hyperband", "--seed", "0",
                   "--mixer", "transformer", "--results", "{out}"),
                  ("sweep", "report", "regime-transformer", "--results", "{out}")),
        # no smoke size: the space itself sets the trials' width (256-512), depth and steps (up to 3000)
        report=(("sweep", "report", "regime-transformer", "--results", "{out}"),),
        table="sweeps/regime-transformer/report.md"),
    budget_s=2 * 3600,
    machine="one H200, eight workers sharing it",
)
