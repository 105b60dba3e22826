"""Six mixers as language models on Debian's documentation at ~45-51M parameters: loss, perplexity, step time."""

from falcon_lab.experiments.declare import Commands, Experiment

MIXERS = ("transformer", "mamba2", "deltanet", "gated-deltanet", "falcon-1a.3", "falcon-3a.3")
SIZE = ("--set", "model.d_model=512", "--set", "model.n_layers=6", "--set", "model.n_heads=8")
TRAIN = (*SIZE, "--set", "data.path=data/debian-docs", "--set", "data.seq_len=1024", "--set", "train.batch_size=32",
         "--set", "train.max_steps=300", "--set", "optim.warmup_steps=30", "--set", "train.val_every=150", "--set",
         "train.ckpt_every=150", "--set", "train.log_every=10", "--set", "data.val_windows=64", "--set",
         "train.compile=true")


def bench(context: int) -> tuple[str, ...]:
    """The training step of every mixer alone at `context` tokens a row, 32 x 1024 tokens a step."""
    return ("bench", "step", "--task", "random", "--preset", "small", "--mixers", ",".join(MIXERS), *SIZE, "--set",
            f"data.seq_len={context}", "--set", "data.vocab_size=50304", "--set",
            f"train.batch_size={32 * 1024 // context}", "--set", "train.compile=false", "--steps", "5", "--out",
            f"{{out}}/bench-{context}")


EXPERIMENT = Experiment(
    record="lm/debian-docs-2026-12-02",
    question="On real English text, how do the Falcon rules' loss and perplexity compare with the baselines' at "
             "~45-51M parameters, and how fast is each step?",
    trains=Commands(
        commands=(*(("train", "--task", "fineweb", "--preset", "fineweb-124m", "--mixer", m, *TRAIN, "--no-progress",
                     "--out", f"{{out}}/runs/{m}", "--results", "{results}") for m in MIXERS),
                  *(("eval", "ppl", "--run", f"{{out}}/runs/{m}", "--batch-size", "16") for m in MIXERS),
                  bench(1024), bench(4096)),
        table="bench-1024/step.md"),
    budget_s=1800,
    machine="one H200, with data/debian-docs (`lab data debian-docs --corpus python-docs --corpus linux-docs`)",
    not_remade="table.md, table.csv and loss.png across the runs (study.py at f616c0b3 under "
               "records/lm/debian-docs-2026-12-02/), and three runs at once as the record's call trained them",
)
