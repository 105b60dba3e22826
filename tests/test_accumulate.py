"""Gradient accumulation: N micro-batches per optimiser step train exactly as one batch (losses,
weights, learning rates, tokens), also when resumed mid-run, under DDP, and through the NaN stop."""

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

from falcon_lab.config import ConfigError, config_hash, dump_yaml, load_config
from falcon_lab.runs import RunDir
from falcon_lab.train import LabModule, RunFailed, run_training
from falcon_lab.train.callbacks import read_metrics
from falcon_lab.train.data import train_batch
from falcon_lab.tasks.addition import IGNORE_INDEX
from tests.train_util import StopAt

ROOT = Path(__file__).resolve().parents[1]
STEPS = 8
# Packing off and widths 1..8: rows hold different numbers of labelled tokens, so a micro-batch mean
# would differ from the global mean; only the global-count normalisation matches N = 1.
SETTINGS = [f"train.max_steps={STEPS}", "train.batch_size=8", "train.log_every=1", "train.ckpt_every=4",
            "train.val_every=4", "optim.warmup_steps=2", "data.packing=false"]


def cfg_with(accumulate: int, *overrides: str):
    return load_config("tiny", overrides=[*SETTINGS, f"train.accumulate={accumulate}", *overrides])


def train(accumulate: int, root: Path, **kwargs) -> Path:
    run_training(cfg_with(accumulate), out=root / "run", results=root, progress=False, **kwargs)
    return root / "run"


def weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]


def assert_same_run(a: Path, b: Path) -> None:
    ra, rb = read_metrics(a / "metrics.csv"), read_metrics(b / "metrics.csv")
    assert [r["step"] for r in ra] == [r["step"] for r in rb] == list(range(1, STEPS + 1))
    for x, y in zip(ra, rb):
        for key in ("loss", "grad_norm", "val_loss"):
            if key in y:
                assert abs(x[key] - y[key]) <= 1e-5, (x["step"], key, x[key], y[key])
        assert x["lr"] == pytest.approx(y["lr"], rel=1e-12) and x["tokens"] == y["tokens"]
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    for name, value in wb.items():
        torch.testing.assert_close(wa[name], value, rtol=0, atol=1e-5, msg=name)


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The run with one batch per step (N = 1, Lightning's automatic optimisation)."""
    return train(1, tmp_path_factory.mktemp("n1"))


def test_rows_carry_different_numbers_of_labelled_tokens() -> None:
    _, labels = train_batch(cfg_with(1), 0, 0, 1)
    counts = (labels != IGNORE_INDEX).sum(dim=1)
    assert len(set(counts.tolist())) > 1


@pytest.mark.parametrize("accumulate", [2, 4])
def test_n_micro_batches_train_as_one_batch(accumulate: int, reference: Path, tmp_path: Path) -> None:
    assert_same_run(train(accumulate, tmp_path), reference)


def test_a_stopped_accumulating_run_resumes_onto_the_same_curve(reference: Path, tmp_path: Path) -> None:
    first = run_training(cfg_with(2), out=tmp_path / "run", results=tmp_path, progress=False, callbacks=[StopAt(5)])
    assert first.status == "stopped" and first.steps == 5
    second = run_training(cfg_with(2), out=tmp_path / "run", results=tmp_path, progress=False)
    assert second.status == "finished" and second.resumed_from == 5 and second.steps == STEPS
    assert_same_run(tmp_path / "run", reference)


def test_a_non_finite_loss_in_one_micro_batch_stops_the_run_naming_the_step(tmp_path: Path,
                                                                             monkeypatch: pytest.MonkeyPatch) -> None:
    forward = LabModule.forward
    calls = []

    def poisoned(self, input_ids):
        logits = forward(self, input_ids)
        if self.training and self.global_step + 1 == 6:
            calls.append(1)
            if len(calls) == 2:  # the second of the step's micro-batches only
                logits = logits + math.nan
        return logits

    monkeypatch.setattr(LabModule, "forward", poisoned)
    with pytest.raises(RunFailed, match=r"the loss is nan at step 6; .*last good checkpoint: .*\(step 4\)"):
        train(2, tmp_path)
    ckpt = torch.load(RunDir(tmp_path / "run").last_checkpoint, weights_only=False)
    assert ckpt["global_step"] == 4
    assert all(torch.isfinite(t).all() for t in ckpt["state_dict"].values())
    assert max(r["step"] for r in read_metrics(tmp_path / "run" / "metrics.csv")) == 5


def test_accumulate_must_divide_the_rows_per_rank_and_stays_out_of_old_run_ids() -> None:
    with pytest.raises(ConfigError, match=r"train.accumulate=3 does not divide the 8 rows per rank.*1, 2, 4, 8"):
        cfg_with(3)
    with pytest.raises(ConfigError, match=r"train.accumulate=4 does not divide the 2 rows per rank"):
        cfg_with(4, "train.devices=4")
    with pytest.raises(ConfigError, match=r"train.accumulate must be >= 1, got 0"):
        cfg_with(0)
    assert "\n" not in str(pytest.raises(ConfigError, cfg_with, 3).value)
    assert config_hash(cfg_with(1)) == config_hash(load_config("tiny", overrides=SETTINGS))
    assert config_hash(cfg_with(2)) != config_hash(cfg_with(1))


DDP_RUN = """
import sys
import torch
from falcon_lab.config import load_config
from falcon_lab.train import run_training

torch.set_num_threads(1)
cfg = load_config(config_file=sys.argv[1], overrides=["train.devices=2", "train.accelerator=cpu"])
run_training(cfg, out=sys.argv[2], results=sys.argv[3], progress=False)
"""


def test_two_ranks_accumulating_train_as_one_process_of_one_batch(reference: Path, tmp_path: Path) -> None:
    config, script = tmp_path / "config.yaml", tmp_path / "ddp_run.py"
    config.write_text(dump_yaml(cfg_with(2)))
    script.write_text(textwrap.dedent(DDP_RUN))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    for key in ("MASTER_PORT", "MASTER_ADDR", "WORLD_SIZE", "LOCAL_RANK", "NODE_RANK", "RANK"):
        env.pop(key, None)
    proc = subprocess.run([sys.executable, str(script), str(config), str(tmp_path / "run"), str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_same_run(tmp_path / "run", reference)
