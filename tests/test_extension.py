"""A new rule and a new task, declared in this file alone and registered through the public API, run through
everything that iterates over rules and tasks: the op, the mixer registry, training, evaluation and the table,
from Python and from the `lab` command (which loads them through its plugin hook, LAB_PLUGINS).

The rule, falcon-1e: falcon-1 with ctxη bounded by the key energy (the inner-product rules' bound) in place of
the ridge bound; its forms are falcon-1's. The task, reverse: copy a string of digits backwards.
"""

from __future__ import annotations

import dataclasses
import json
import os
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import torch

from falcon_lab.kernels import RULES, fast_weight_rule, register_rule, rule_spec, unregister_rule
from falcon_lab.task import LengthTask, register_task, unregister_task
from falcon_lab.tasks.synthetic import IGNORE_INDEX, PAD, Sample

ROOT = Path(__file__).resolve().parents[1]

FALCON_1E = dataclasses.replace(rule_spec("falcon-1"), name="falcon-1e", gain_bound="energy",
                                summary="falcon-1 with ctxη bounded by the key energy alone")

DIGIT, SEP, BOS = 1, 11, 12  # digit d is token d + 1; PAD is 0


class ReverseDigits:
    """A string of n digits, a separator, then the digits backwards: the answer's tokens are scored. A sequence
    of T tokens holds n = (T − 1) // 2 digits (even T: a leading BOS, not scored)."""

    name = "reverse"
    vocab_size = 13
    min_length = 3

    def check_length(self, length: int) -> None:
        if length < self.min_length:
            raise ValueError(f"a reverse sequence needs at least {self.min_length} tokens, got {length}")

    def sample(self, rng: random.Random, length: int) -> Sample:
        n = (length - 1) // 2
        digits = [DIGIT + rng.randrange(10) for _ in range(n)]
        answer = digits[::-1]
        lead = [BOS] * (length - 2 * n - 1)
        tokens = lead + digits + [SEP] + answer
        labels = [IGNORE_INDEX] * (len(lead) + n) + answer + [IGNORE_INDEX]
        return Sample(tuple(tokens[:length]), tuple(labels[:length]))

    def record(self, sample: Sample) -> dict[str, Any]:
        question = sample.tokens[:sample.tokens.index(SEP)]
        return {"tokens": list(sample.tokens), "labels": list(sample.labels),
                "digits": "".join(str(t - DIGIT) for t in question if DIGIT <= t < SEP)}


REVERSE = LengthTask("reverse", lambda data: ReverseDigits(), summary="copy a string of digits backwards",
                     preset="parity-tiny",
                     settings=("data.lengths=3,9", "data.test_lengths=10,13", "eval.n_per_length=4"))


def register() -> None:
    """The plugin hook's function (LAB_PLUGINS=test_extension:register): registers the rule and the task."""
    register_rule(FALCON_1E)
    register_task(REVERSE)


@pytest.fixture
def registered():
    register()
    yield
    unregister_rule(FALCON_1E.name)
    unregister_task(REVERSE.name)


def test_the_rule_runs_falcon_1s_forms_and_every_layer_sees_it(registered) -> None:
    from falcon_lab.mixers import MIXERS, build_mixer

    assert "falcon-1e" in RULES and "falcon-1e" in MIXERS
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 9, 2, 8, generator=g, dtype=torch.float64) for _ in range(3))
    beta, lam = torch.rand(1, 9, 2, generator=g, dtype=torch.float64), torch.rand(1, 9, 2, dtype=torch.float64)
    for backend in ("recurrent", "masked", "chunk"):
        ours, _ = fast_weight_rule(q, k, v, beta, lam, rule="falcon-1e", backend=backend)
        theirs, _ = fast_weight_rule(q, k, v, beta, lam, rule="falcon-1", backend=backend)
        assert torch.equal(ours, theirs), backend
    mixer = build_mixer("falcon-1e", 16, 2)
    assert mixer.eta_bound == "energy" and build_mixer("falcon-1", 16, 2).eta_bound == "ridge"


def test_the_registries_are_left_as_they_were() -> None:
    from falcon_lab.config import TASKS
    from falcon_lab.mixers import MIXERS

    assert "falcon-1e" not in RULES and "falcon-1e" not in MIXERS and "reverse" not in TASKS


def test_train_evaluate_and_table_through_the_python_api(registered, tmp_path: Path) -> None:
    from falcon_lab.config import config_hash, load_config
    from falcon_lab.eval.callback import read_evals
    from falcon_lab.eval.training import evaluation_callbacks
    from falcon_lab.reproduce.jobs import Job
    from falcon_lab.reproduce.sequences import write_tables
    from falcon_lab.train import run_training

    cfg = load_config(REVERSE.preset, overrides=[*REVERSE.settings, "train.val_every=2"], task="reverse",
                      mixer="falcon-1e", train__max_steps=4, train__batch_size=8)
    result = run_training(cfg, results=tmp_path, evaluations=evaluation_callbacks, progress=False)
    run = tmp_path / "runs" / config_hash(cfg)
    assert json.loads((run / "run.json").read_text())["status"] == "finished", result
    rows = read_evals(run / "evals.csv")
    assert [r["step"] for r in rows] == [2, 4]
    assert sorted(rows[-1]["teacher_forced"]) == [*range(3, 10), *range(10, 14)]
    assert write_tables([Job(cfg, label="falcon-1e")], tmp_path, tmp_path / "table", "test") == 1
    table = (tmp_path / "table" / "table.md").read_text()
    assert table.startswith("# reverse: accuracy at the best step (train lengths 3–9, held out 10–13)")
    assert "| falcon-1e |" in table


def test_train_evaluate_and_table_through_the_lab_command(tmp_path: Path) -> None:
    """`lab` in a process of its own: the rule and the task reach it through LAB_PLUGINS alone."""
    env = {**os.environ, "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}",
           "LAB_PLUGINS": "test_extension:register"}

    def lab(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "falcon_lab", *args], env=env, capture_output=True, text=True,
                              timeout=600)

    data = lab("data", "reverse", "--lengths", "5", "--n-per-length", "2", "--out", str(tmp_path / "r.jsonl"))
    assert data.returncode == 0, data.stderr
    first = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[0])
    assert first["task"] == "reverse" and first["tokens"][2] == SEP and first["digits"][::-1] == "".join(
        str(t - DIGIT) for t in first["tokens"][3:])
    train = lab("train", "--task", "reverse", "--mixer", "falcon-1e", "--preset", "parity-tiny", "--max-steps", "2",
                "--no-progress", "--set", "data.lengths=3,9", "--set", "data.test_lengths=10,13", "--set",
                "eval.n_per_length=2", "--set", "train.val_every=2", "--results", str(tmp_path),
                "--out", str(tmp_path / "run"))
    assert train.returncode == 0, train.stderr
    assert "finished (2 steps)" in train.stdout
    table = lab("reproduce", "reverse", "--rows", "falcon-1e", "--seeds", "1", "--max-steps", "2", "--results",
                str(tmp_path), "--out", str(tmp_path / "table"))
    assert table.returncode == 0, table.stderr
    text = (tmp_path / "table" / "table.md").read_text()
    assert text.startswith("# reverse: accuracy at the best step") and "| falcon-1e |" in text
    bad = subprocess.run([sys.executable, "-m", "falcon_lab", "train", "--help"], capture_output=True, text=True,
                         env={**env, "LAB_PLUGINS": "no_such_plugin"}, timeout=120)
    assert bad.returncode == 2 and bad.stderr.strip() == ("lab: LAB_PLUGINS: cannot import 'no_such_plugin': "
                                                          "ModuleNotFoundError: No module named 'no_such_plugin'")
