"""The alignment ablation in the same-time regime of the addition table: the 2×2 at the table's size."""

from falcon_lab.experiments.declare import AlignmentGrid, Experiment

EXPERIMENT = Experiment(
    record="ablation/same-time",
    question="In the same-time regime, how do timing (RAW/RBW) and write pairing (shifted/same-time) move the fit "
             "(widths 1-32) and reach (33-48) of Falcon-1A.3, Falcon-1.3, Falcon-3A.3, DeltaNet and RetNet (NoPE)?",
    # 5 mixers × 4 cells × 3 seeds = 60 runs; every cell keeps the preset's row settings but the cell's own timing
    # and pairing (the Falcon rows' gate off and λ̄ = 0, RetNet without RoPE in all four), so each row's same-time
    # cell is the same-time table's run. Gated DeltaNet and Mamba-2, which do not fit there, are left out of the runs
    # and (`only`) of the tables.
    trains=AlignmentGrid(task="addition", preset="same-time",
                         mixers=("falcon-1a.3", "falcon-1.3", "falcon-3a.3", "deltanet", "retnet"), seeds=3, only=True),
    # Trained one after another in one process by id with CUDA graphs on an H100, a run took 70.9-114.3 s,
    # compilation and evaluations included (records/ablation/same-time/runs, timings.train_s): the 40 runs left,
    # about 1.1 h.
    budget_s=1.25 * 3600,
    machine="one H100",
    # every mixer here takes its samples by id, so its step replays from CUDA graphs (10-41% cheaper a step on an
    # H100, records/bench/samples-by-id/); neither setting is part of a run's id
    gpu_settings=("train.compile=true", "train.cuda_graphs=true"),
)
