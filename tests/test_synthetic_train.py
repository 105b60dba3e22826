"""The synthetic tasks through the lab: config validation, batches of a run, `lab data <task>`,
`lab train --task <task>` with its per-length evaluation in evals.csv."""

import json
import re
from functools import partial
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.config import ConfigError, config_hash, load_config
from falcon_lab.eval.callback import read_evals
from falcon_lab.eval.training import evaluation_callbacks
from falcon_lab.train import run_training
from falcon_lab.train.data import seq_len, sequence_task, train_batch, vocab_size
from falcon_lab.tasks.synthetic import eval_samples, make_batch

# Training with the evaluations its configuration asks for, as `lab train` runs it.
train = partial(run_training, evaluations=evaluation_callbacks)

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ROOT = Path(__file__).resolve().parents[1]
TASKS = ("mqar", "parity", "permutation")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, ANSI.sub("", result.output)


@pytest.mark.parametrize("task", TASKS)
def test_each_tiny_preset_loads_its_task(task: str) -> None:
    cfg = load_config(f"{task}-tiny")
    assert cfg.task == task and cfg.eval.enabled
    lo, hi = cfg.data.lengths
    # held out and longer: 4x for parity and permutation, twice the length (and pairs) for MQAR
    assert cfg.data.test_lengths[0] > hi and cfg.data.test_lengths[1] >= (2 if task == "mqar" else 4) * hi
    assert seq_len(cfg) == hi and vocab_size(cfg) == sequence_task(cfg).vocab_size


@pytest.mark.parametrize(("task", "override", "expected"), [
    ("parity", "data.test_lengths=8,64", "data.test_lengths [8, 64] must be held out: longer than every train "
                                         "length (data.lengths [1, 16]); accepted: a range starting at 17"),
    ("parity", "data.lengths=0,16", "data.lengths must satisfy 1 <= lo <= hi, got [0, 16]"),
    ("parity", "data.lengths=9,4", "data.lengths must satisfy 1 <= lo <= hi, got [9, 4]"),
    ("parity", "data.seq_len=8", "data.seq_len=8 is shorter than the longest train length 16"),
    ("permutation", "data.group=S6", "data.group='S6' is not accepted; accepted: S5, A5"),
    ("mqar", "data.tokens_per_pair=2", "data.tokens_per_pair=2 leaves no query slot for every key"),
    ("mqar", "data.vocab_size=2", "data.vocab_size=2 is too small for MQAR"),
    ("mqar", "data.lengths=4,32", "data.lengths [4, 32] starts below 8: an MQAR sequence needs "
                                  "data.tokens_per_pair=8 tokens for one pair; accepted: lengths >= 8"),
    ("mqar", "data.lengths=40,30", "data.lengths must satisfy 8 <= lo <= hi, got [40, 30]"),
    ("mqar", "data.test_lengths=33,400", "MQAR length 400 needs 50 distinct keys but vocab_size 64 has 31"),
    ("parity", "data.packing=true", "data.packing applies to task 'addition' only; accepted for 'parity': false"),
    ("parity", "data.lengths=1", "data.lengths expects tuple[int, int]"),
])
def test_config_mistakes_name_the_key(task: str, override: str, expected: str) -> None:
    with pytest.raises(ConfigError) as err:
        load_config(f"{task}-tiny", overrides=[override])
    assert expected in str(err.value) and "\n" not in str(err.value)


def test_new_keys_leave_recorded_run_ids_alone_and_change_the_tasks_ids() -> None:
    # four configs of the packed table's runs (2026-11-30, before most keys existed; the record left records/ at
    # f616c0b3), and every run a kept record names by its id
    old = sorted((ROOT / "tests" / "data" / "recorded_configs").glob("*.yaml"))
    kept = [p for p in (ROOT / "records").rglob("runs*/*/config.yaml") if re.fullmatch(r"[0-9a-f]{10}", p.parent.name)]
    assert len(old) == 4 and len(kept) >= 50
    for path, run_id in [(p, p.stem) for p in old] + [(p, p.parent.name) for p in kept]:
        assert config_hash(load_config(config_file=path)) == run_id, path
    parity = load_config("parity-tiny")
    assert config_hash(parity) != config_hash(load_config("parity-tiny", overrides=["data.test_lengths=17,128"]))
    permutation = load_config("permutation-tiny")
    assert config_hash(permutation) != config_hash(load_config("permutation-tiny", overrides=["data.group=A5"]))


@pytest.mark.parametrize("task", TASKS)
def test_a_runs_batches_are_the_tasks_sliced_by_rank(task: str) -> None:
    cfg = load_config(f"{task}-tiny", overrides=["train.batch_size=8"])
    ids, labels = train_batch(cfg, 4, 0, 1)
    expected = make_batch(sequence_task(cfg), cfg.train.seed, 4, 8, cfg.data.lengths, seq_len(cfg))
    assert torch.equal(ids, expected[0]) and torch.equal(labels, expected[1])
    halves = [train_batch(cfg, 4, r, 2) for r in (0, 1)]
    assert torch.equal(torch.cat([h[0] for h in halves]), ids)
    assert torch.equal(torch.cat([h[1] for h in halves]), labels)
    assert ids.shape == (8, cfg.data.lengths[1]) and int(ids.max()) < vocab_size(cfg)


@pytest.mark.parametrize("task", ["parity", "permutation"])
def test_a_length_curriculum_ramps_the_longest_train_length_and_keeps_the_batch_shape(task: str) -> None:
    cfg = load_config(f"{task}-tiny", overrides=["train.batch_size=8", "data.curriculum=linear",
                                                 "data.start_width=2", "data.ramp_steps=10"])
    lo, hi = cfg.data.lengths
    for step, longest in ((0, 2), (5, 2 + (hi - 2) * 5 // 10), (10, hi), (50, hi)):
        ids, labels = train_batch(cfg, step, 0, 1)
        expected = make_batch(sequence_task(cfg), cfg.train.seed, step, 8, (lo, longest), seq_len(cfg))
        assert torch.equal(ids, expected[0]) and torch.equal(labels, expected[1]), step
        assert ids.shape == (8, hi)  # padded to the longest train length at every step
    plain = load_config(f"{task}-tiny", overrides=["train.batch_size=8"])
    assert not torch.equal(train_batch(cfg, 0, 0, 1)[0], train_batch(plain, 0, 0, 1)[0])
    with pytest.raises(ConfigError, match=rf"data.start_width={hi + 1} must lie in data.lengths \[{lo}, {hi}\]"):
        load_config(f"{task}-tiny", overrides=["data.curriculum=linear", f"data.start_width={hi + 1}"])


@pytest.mark.parametrize("task", TASKS)
def test_lab_train_runs_each_task_and_writes_accuracy_per_length(task: str, tmp_path: Path) -> None:
    code, out = invoke("train", "--task", task, "--preset", f"{task}-tiny", "--max-steps", "3", "--no-progress",
                       "--set", "eval.n_per_length=2", "--set", "train.val_every=2",
                       "--results", str(tmp_path), "--out", str(tmp_path / "run"))
    assert code == 0, out
    assert "finished (3 steps)" in out and "val_acc" in out
    cfg = load_config(f"{task}-tiny")
    rows = read_evals(tmp_path / "run" / "evals.csv")
    assert [r["step"] for r in rows] == [2, 3]
    lo, hi = cfg.data.lengths
    lengths = list(range(lo, hi + 1)) + list(range(cfg.data.test_lengths[0], cfg.data.test_lengths[1] + 1))
    for row in rows:
        assert sorted(row["teacher_forced"]) == lengths == sorted(row["per_token"])
        assert all(0 <= v <= 100 for v in row["teacher_forced"].values())
        val = [row["teacher_forced"][n] for n in range(lo, hi + 1)]
        assert row["val_acc"] == pytest.approx(sum(val) / len(val))
        test = [row["per_token"][n] for n in range(cfg.data.test_lengths[0], cfg.data.test_lengths[1] + 1)]
        assert row["ood_token_mean"] == pytest.approx(sum(test) / len(test))
    assert (tmp_path / "run" / "checkpoints" / "best.pt").exists()
    state = json.loads((tmp_path / "run" / "run.json").read_text())
    assert state["status"] == "finished"


def test_evaluation_scores_a_perfect_model_fully_and_a_wrong_one_not() -> None:
    from falcon_lab.eval.lengths import evaluate_lengths
    from falcon_lab.tasks.synthetic import Parity

    class Oracle(torch.nn.Module):
        """Logits that put the running parity first at every position (`wrong`: the other bit at each
            sample's last position)."""

        def __init__(self, wrong: bool) -> None:
            super().__init__()
            self.wrong = wrong
            self.p = torch.nn.Parameter(torch.zeros(()))

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            parity = torch.cumsum((ids == 2).long(), -1) % 2
            if self.wrong:
                real = ids != 0  # rows are padded to the longest of their pass
                last = real & ~torch.cat([real[:, 1:], torch.zeros_like(real[:, :1])], 1)
                parity = torch.where(last, 1 - parity, parity)
            return torch.nn.functional.one_hot(1 + parity, 3).float()

    right = evaluate_lengths(Oracle(False), Parity(), train_lengths=(1, 4), test_lengths=(5, 9), n_per_length=6)
    assert set(right.teacher_forced.values()) == {100.0} and set(right.per_token.values()) == {100.0}
    assert right.summary() == {"val_acc": 100.0, "ood_mean": 100.0, "val_token_acc": 100.0, "ood_token_mean": 100.0}
    wrong = evaluate_lengths(Oracle(True), Parity(), train_lengths=(1, 4), test_lengths=(5, 9), n_per_length=6)
    assert set(wrong.teacher_forced.values()) == {0.0}  # the last position of every sample is wrong
    assert wrong.per_token[4] == pytest.approx(75.0) and wrong.per_token[1] == 0.0


@pytest.mark.parametrize(("task", "args"), [
    ("parity", ["--lengths", "2-3"]),
    ("permutation", ["--lengths", "2-3", "--group", "A5"]),
    ("mqar", ["--lengths", "16-17", "--vocab-size", "32"]),
])
def test_lab_data_writes_the_samples_a_run_evaluates(task: str, args: list[str], tmp_path: Path) -> None:
    out = tmp_path / f"{task}.jsonl"
    code, text = invoke("data", task, *args, "--split", "test", "--n-per-length", "3", "--seed", "5",
                        "--show", "2", "--out", str(out))
    assert code == 0, text
    assert f"wrote 6 test samples (seed 5) to {out}" in text
    assert len([line for line in text.splitlines() if line.startswith("{")]) == 2
    records = [json.loads(line) for line in out.read_text().splitlines()]
    options = {"group": "A5"} if task == "permutation" else {"vocab_size": 32} if task == "mqar" else {}
    from falcon_lab.tasks.synthetic import make_task

    lo, hi = map(int, args[1].split("-"))
    expected = [s for n in range(lo, hi + 1) for s in eval_samples(make_task(task, **options), "test", n, 3, 5)]
    assert [(r["tokens"], r["labels"]) for r in records] == [(list(s.tokens), list(s.labels)) for s in expected]


@pytest.mark.parametrize(("args", "expected"), [
    (["parity", "--split", "ood"], "lab data parity: --split 'ood' is not accepted; accepted: train, val, test"),
    (["parity", "--lengths", "4-2"], "--lengths '4-2' must satisfy 1 <= LO <= HI"),
    (["permutation", "--group", "S4"], "lab data permutation: --group='S4' is not accepted; accepted: S5, A5"),
    (["mqar", "--lengths", "4"], "MQAR length 4 holds no pair"),
    (["mqar", "--tokens-per-pair", "2"], "--tokens-per-pair=2 leaves no query slot"),
])
def test_lab_data_mistakes_exit_2_in_one_line_and_write_nothing(args: list[str], expected: str,
                                                              tmp_path: Path) -> None:
    code, text = invoke("data", *args, "--out", str(tmp_path / "x.jsonl"))
    assert code == 2 and expected in text and text.count("\n") == 1
    assert not list(tmp_path.iterdir())


def test_lab_reproduce_a_task_writes_its_table_and_skips_finished_runs(tmp_path: Path) -> None:
    args = ["reproduce", "parity", "--rows", "transformer", "--seeds", "1", "--max-steps", "2",
            "--set", "eval.n_per_length=2", "--results", str(tmp_path)]
    code, out = invoke(*args)
    assert code == 0, out
    assert "transformer seed 0" in out and "held-out" in out and "mean33-48" not in out
    table = (tmp_path / "parity" / "table.md").read_text()
    assert "lab reproduce parity --rows transformer --seeds 1 --max-steps 2" in table
    assert re.search(r"\| transformer \| \d+K \| 1/1 \|", table)
    import pandas as pd

    per_length = pd.read_csv(tmp_path / "parity" / "per_length.csv")
    assert sorted(per_length["length"]) == list(range(1, 65))
    summary = pd.read_csv(tmp_path / "parity" / "table.csv")
    assert summary.loc[0, "val_acc_mean"] == pytest.approx(per_length["teacher_forced"][:16].mean())
    assert (tmp_path / "parity" / "per_length.png").read_bytes().startswith(b"\x89PNG")
    code, out = invoke(*args)
    assert code == 0 and "finished before" in out


def test_lab_reproduce_a_task_refuses_unknown_rows_in_one_line(tmp_path: Path) -> None:
    code, out = invoke("reproduce", "mqar", "--rows", "lstm", "--results", str(tmp_path))
    assert code == 2 and "lab reproduce: unknown row 'lstm'; accepted: transformer, retnet" in out
    assert out.count("\n") == 1


def test_a_resumed_task_run_trains_and_evaluates_as_an_uninterrupted_one(tmp_path: Path) -> None:
    from lightning.pytorch.callbacks import Callback

    from falcon_lab.train.callbacks import read_metrics

    class StopAt(Callback):
        def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
            if trainer.global_step == 4:
                trainer.should_stop = True

    cfg = load_config("parity-tiny", mixer="transformer", overrides=[
        "train.max_steps=8", "train.val_every=4", "train.ckpt_every=4", "train.log_every=1", "eval.n_per_length=2",
        "data.test_lengths=17,20"])
    whole = train(cfg, out=tmp_path / "whole", results=tmp_path / "a", progress=False)
    first = train(cfg, out=tmp_path / "split", results=tmp_path / "b", callbacks=[StopAt()], progress=False)
    assert first.status == "stopped"
    resumed = train(cfg, out=tmp_path / "split", results=tmp_path / "b", progress=False)
    assert whole.status == resumed.status == "finished" and resumed.resumed_from == 4
    losses = [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "whole" / "metrics.csv")]
    again = [(r["step"], r["loss"]) for r in read_metrics(tmp_path / "split" / "metrics.csv")]
    assert [s for s, _ in again] == [s for s, _ in losses] == list(range(1, 9))
    assert [v for _, v in again] == pytest.approx([v for _, v in losses], rel=1e-5)
    a, b = read_evals(tmp_path / "whole" / "evals.csv"), read_evals(tmp_path / "split" / "evals.csv")
    assert [r["step"] for r in a] == [r["step"] for r in b] == [4, 8]
    for x, y in zip(a, b):
        assert x["per_token"] == pytest.approx(y["per_token"], abs=1e-6)
