"""MQAR against model width on a GPU: eight mixers at d_model 64, 128, 256, at lr 3e-3 and 1e-3, 1800 steps."""

from falcon_lab.experiments.declare import Experiment, Row, RunGrid

MIXERS = ("transformer", "retnet", "mamba2", "deltanet", "gated-deltanet", "falcon-1a.3", "falcon-3a.3", "falcon-1.3")

EXPERIMENT = Experiment(
    record="tasks/mqar_width/gpu-best-rate",
    question="How does each mixer's recall on MQAR grow with its width, at the learning rate that fits it best?",
    trains=RunGrid(task="mqar", preset="mqar-tiny", seeds=3, max_steps=1800, rows=tuple(
        Row(f"{mixer} d{width} lr{lr}", mixer, (f"model.d_model={width}", f"optim.lr={lr}"))
        for lr in ("3e-3", "1e-3") for width in (64, 128, 256) for mixer in MIXERS)),
    budget_s=1800,
    machine="one GPU, 14-16 runs sharing it (--per-gpu 14)",
    not_remade="the choice of each mixer and width's best rate and width.png (best_rate.py and study.py at "
               "f616c0b3 under records/tasks/mqar_width/)",
)
