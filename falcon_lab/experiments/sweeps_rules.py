"""The Falcon rules' knobs on addition at the paper's protocol: a 40-trial TPE sweep with Hyperband pruning."""

from falcon_lab.experiments.declare import Commands, Experiment, smoke_sets

SWEEP = ("--trials", "40", "--workers", "8", "--study", "rules", "--objective", "val_token_acc", "--sampler", "tpe",
         "--pruner", "hyperband", "--seed", "0", "--set", "train.max_steps=500", "--set", "eval.free_per_length=0")

EXPERIMENT = Experiment(
    record="sweeps/rules",
    question="Which rule, gain, ridge, window, QK-norm and learning rate learn addition's tokens best in 500 steps?",
    trains=Commands(
        # the record's second call resumed the same study with --prune-after 300 (a setting of the pruner alone)
        commands=(("sweep", "run", "rules", *SWEEP, "--prune-after", "200", "--results", "{out}"),
                  ("sweep", "run", "rules", *SWEEP, "--prune-after", "300", "--results", "{out}")),
        smoke_commands=(("sweep", "run", "rules", "--trials", "1", "--study", "rules", "--preset", "addition-tiny",
                         "--set", "train.max_steps=3", *smoke_sets(), "--results", "{out}"),
                        ("sweep", "report", "rules", "--results", "{out}")),
        report=(("sweep", "report", "rules", "--results", "{out}"),),
        table="sweeps/rules/report.md"),
    budget_s=2 * 3600,
    machine="one H200, eight workers sharing it",
)
