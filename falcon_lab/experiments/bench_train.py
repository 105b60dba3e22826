"""Every mixer trained for a few hundred steps at the small preset: tokens a second, loss, parameters."""

from falcon_lab.experiments.declare import Commands, Experiment, smoke_sets

EXPERIMENT = Experiment(
    record="bench/train",
    question="How fast does each mixer train at the small preset, and how far does its loss fall in 300 steps?",
    trains=Commands(
        commands=(("bench", "train", "--preset", "small", "--max-steps", "300", "--timeout", "60", "--out", "{out}",
                   "--work", "{results}/runs/bench-train"),),
        smoke_commands=(("bench", "train", "--preset", "tiny", "--mixers", "deltanet", "--max-steps", "3",
                         *smoke_sets(), "--out", "{out}", "--work", "{results}/runs/bench-train-smoke"),),
        table="train.md"),
    budget_s=1200,
    machine="one H200",
)
