"""The language model's training step at the paper's size (124M, `fineweb-124m`), compiled, on random tokens: each
recurrent row's tokens a second beside the transformer's at rows of 1,024 and of 4,096 tokens (`lab bench step
--task random`: the step alone, no data pipeline, no Lightning). The throughput target: every recurrent row at
≥ 0.8× the transformer's at 1,024 and ≥ 1.0× at 4,096."""

from falcon_lab.experiments.declare import Commands, Experiment, smoke_sets

ROWS = "transformer,falcon-1a.3,falcon-3a.3,falcon-1.3,mamba2,gated-deltanet,deltanet,retnet"


def _step(seq_len: int, batch: int) -> tuple[str, ...]:
    return ("bench", "step", "--task", "random", "--preset", "fineweb-124m", "--steps", "10", "--mixers", ROWS,
            "--set", f"data.seq_len={seq_len}", "--set", f"train.batch_size={batch}", "--set", "train.compile=true",
            "--out", "{out}/" + str(seq_len))


EXPERIMENT = Experiment(
    record="bench/lm-step",
    question="At the paper's language-model size, compiled, how many tokens a second does each recurrent row's "
             "training step take beside the transformer's, at 1,024 and at 4,096 tokens a row?",
    trains=Commands(
        commands=(_step(1024, 16), _step(4096, 4)),
        table="1024/step.md",
        smoke_commands=(("bench", "step", "--task", "random", "--preset", "tiny", "--steps", "2", "--mixers",
                         "transformer,falcon-1a.3", *smoke_sets(), "--out", "{out}/1024"),)),
    budget_s=900,
    machine="one H100",
)
