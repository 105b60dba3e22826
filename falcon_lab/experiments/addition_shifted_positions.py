"""Shifted writes in the same-time regime with sinusoidal digit indices, and with no digit positions at all."""

from falcon_lab.experiments.declare import AdditionTable, Experiment

# Shifted writes (x_t = k_{t-1}, x_1 = 0) for every row, DeltaNet included as the control of a rule without Falcon's
# options; otherwise the same-time table's settings (samples apart, the Falcon rows' gate off and λ̄ = 0). The
# setting comes after the preset's row settings, so it overrides the Falcon rows' same-time pairing.
ROWS = ("falcon-1a.3", "falcon-1.3", "deltanet")
SHIFTED = ("model.mixer_options.alignment=shifted",)

EXPERIMENT = Experiment(
    record="addition/shifted-positions",
    question="Do shifted writes fit widths 1-32 and answer past them with digit indices whose step from i to i+1 is "
             "one fixed map (sinusoidal), or with no digit positions at all (samples apart)?",
    trains=(
        # digit indices as the table's (offset by 0-64 on half the samples), each a learned map of its sines and
        # cosines (falcon_lab/mixers/positions.py): index k + 1 is a fixed rotation of index k
        AdditionTable(preset="same-time", rows=ROWS, seeds=3, folder="sinusoidal",
                      overrides=(*SHIFTED, "model.abacus_embed=sinusoidal")),
        # no digit positions: the offsets' share goes back to its default, as it needs positions to offset
        AdditionTable(preset="same-time", rows=ROWS, seeds=3, folder="no-positions",
                      overrides=(*SHIFTED, "model.abacus=null", "model.abacus_shift_frac=1.0")),
    ),
    # Each row's mean elapsed_s over three seeds in records/addition/same-time/runs (falcon-1a.3 327 s, falcon-1.3
    # 433, deltanet 439): 1199 s × 3 seeds × 2 parts = 7194 s (2.0 h) run after run.
    budget_s=2.5 * 3600,
    machine="one H200",
    gpu_settings=("train.compile=true", "train.cuda_graphs=true"),  # its rows take their samples by id
)
