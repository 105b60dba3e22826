"""The transformer without RoPE, digit positions offset by 0-32, samples apart, 6000 steps and an EMA of the weights."""

from falcon_lab.experiments.declare import AdditionTable, Experiment

EXPERIMENT = Experiment(
    record="addition/nope-6000-ema",
    question="Does an EMA of the weights (0.999) steady the transformer's answers past width 32 over 6000 steps?",
    trains=AdditionTable(preset="packed", rows=("transformer",), seeds=3, max_steps=6000, overrides=(
        "model.isolate_samples=true", "model.abacus=32", "model.mixer_options.rope=false", "data.ramp_steps=3000",
        "eval.best_ties=val_loss", "train.ema=0.999")),
    budget_s=2 * 3600,
    machine="one H200",
    gpu_settings=("train.compile=true",),
)
