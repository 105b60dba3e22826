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
    # By id with the step replayed from CUDA graphs (records/bench/samples-by-id/, H100): falcon-1a.3 30.0 ms a step,
    # DeltaNet 39.6, so 6000 steps 180-240 s a run, about 4 min with compilation and evaluations: 6 runs, 25 min.
    budget_s=0.75 * 3600,
    machine="one H100",
    # every row takes its samples by id, so its step replays from CUDA graphs (the weights' average is updated
    # after the optimiser step, outside the graphed forward and backward)
    gpu_settings=("train.compile=true", "train.cuda_graphs=true"),
)
