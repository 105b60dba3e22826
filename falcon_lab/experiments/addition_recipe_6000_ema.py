"""Recurrent rows of the same-time table with the transformer's winning schedule: 6000 steps, an EMA of the weights."""

from falcon_lab.experiments.declare import AdditionTable, Experiment

EXPERIMENT = Experiment(
    record="addition/recipe-6000-ema",
    question="In the same-time regime, does the schedule that took the transformer to a median of at least 97.9 over "
             "widths 33-48 (6000 steps, widths ramped over 3000, an EMA of the weights at 0.999, ties broken by "
             "validation loss) move Falcon-1A.2, Falcon-1A.3 or DeltaNet past 50? Two seeds first: if any row "
             "passes 50, every row of the table with three seeds.",
    # the ramp, tie-break and average as addition_nope_6000_ema.py sets them, over the same-time table's settings
    # (digit indices offset by 0-64 on half the samples, samples apart; the Falcon rows same-time, no gate, λ̄ = 0)
    trains=AdditionTable(preset="same-time", rows=("falcon-1a.2", "falcon-1a.3", "deltanet"), seeds=2,
                         max_steps=6000, overrides=("data.ramp_steps=3000", "eval.best_ties=val_loss",
                                                    "train.ema=0.999")),
    # Three times each row's mean elapsed_s over three seeds in records/addition/same-time/runs (2000 steps:
    # falcon-1a.2 384 s, falcon-1a.3 327, deltanet 439), as 6000 steps took the transformer 2.2-3.4 times its 2000
    # (records/addition/nope-6000-ema): 3 × 1150 s × 2 seeds = 6900 s (1.9 h) run after run.
    budget_s=2.5 * 3600,
    machine="one H200",
    gpu_settings=("train.compile=true",),
)
