"""Lightning loggers of a run: the CSV log always, TensorBoard when asked and installed, a clear error else."""

import csv
import importlib.util
from pathlib import Path

import pytest
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.config import ConfigError, config_hash, load_config
from falcon_lab.train import run_training
from falcon_lab.train.callbacks import read_metrics

SETTINGS = ["train.max_steps=6", "train.log_every=2", "train.val_every=3", "train.ckpt_every=3",
            "optim.warmup_steps=2"]


def tiny(*overrides: str):
    return load_config("tiny", overrides=[*SETTINGS, *overrides])


def test_every_run_keeps_lightnings_csv_log_beside_its_metrics(tmp_path: Path) -> None:
    result = run_training(tiny(), out=tmp_path / "run", results=tmp_path, progress=False)
    assert result.status == "finished"
    (log,) = (tmp_path / "run" / "logs" / "csv").glob("version_*/metrics.csv")
    with log.open(newline="") as f:
        rows = list(csv.DictReader(f))
    ours = read_metrics(tmp_path / "run" / "metrics.csv")
    # the same rows as metrics.csv: the steps' losses and each validation
    assert [int(r["step"]) for r in rows if r["loss"]] == [r["step"] for r in ours if "loss" in r] == [2, 4, 6]
    assert [int(r["step"]) for r in rows if r["val_loss"]] == [3, 6]
    by_step = {int(r["step"]): float(r["loss"]) for r in rows if r["loss"]}
    assert all(by_step[r["step"]] == pytest.approx(r["loss"]) for r in ours if "loss" in r)
    assert (log.parent / "hparams.yaml").is_file()


def test_the_logger_is_placement_so_the_run_id_holds() -> None:
    assert config_hash(tiny("train.logger=tensorboard")) == config_hash(tiny())


def test_an_unknown_logger_is_an_error_naming_the_accepted_ones(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"train.logger='mlflow' is not accepted; accepted: csv, tensorboard, wandb"):
        tiny("train.logger=mlflow")
    result = CliRunner().invoke(app, ["train", "--max-steps", "2", "--set", "train.logger=mlflow",
                                      "--out", str(tmp_path / "run"), "--results", str(tmp_path)])
    assert result.exit_code == 2 and "train.logger='mlflow' is not accepted" in result.output
    assert not (tmp_path / "run").exists()


def test_a_logger_whose_package_is_missing_names_the_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match=r"train.logger=wandb needs the package wandb.*pip install wandb"):
        run_training(tiny("train.logger=wandb"), out=tmp_path / "run", results=tmp_path, progress=False)
    assert not (tmp_path / "run").exists()  # refused before anything is written


@pytest.mark.skipif(importlib.util.find_spec("tensorboard") is None, reason="tensorboard is not installed")
def test_tensorboard_logs_the_rows_when_asked(tmp_path: Path) -> None:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    result = run_training(tiny("train.logger=tensorboard"), out=tmp_path / "run", results=tmp_path, progress=False)
    assert result.status == "finished"
    events = EventAccumulator(str(tmp_path / "run" / "logs" / "tensorboard"))
    events.Reload()
    assert [e.step for e in events.Scalars("loss")] == [2, 4, 6]
    assert [e.step for e in events.Scalars("val_acc")] == [3, 6]
    assert list((tmp_path / "run" / "logs" / "csv").glob("version_*/metrics.csv"))  # the CSV log as well
