"""Run folders, provenance and the SQLite registry; skipping finished runs and refusing foreign folders."""

import json
import os
import re
import sqlite3
from pathlib import Path

import pandas as pd
import pytest

from falcon_lab.config import ConfigError, config_hash, load_config
from falcon_lab.paths import results_root
from falcon_lab.runs import (
    Registry,
    RunBusy,
    RunDir,
    RunLock,
    atomic_write_text,
    provenance,
    record_provenance,
    run_dir_for,
)
from falcon_lab.train import run_training


def tiny(*overrides: str):
    return load_config("tiny", overrides=["train.max_steps=4", "train.log_every=1", "train.val_every=2",
                                          "train.ckpt_every=2", *overrides])


def test_registry_upserts_rows_that_pandas_reads(tmp_path: Path) -> None:
    registry = Registry(tmp_path / "lab.db")
    registry.upsert("abc", task="addition", mixer="transformer", status="running", steps=0, commit="f" * 40,
                    created_at="2026-01-01T00:00:00+00:00")
    registry.upsert("abc", status="finished", steps=10, final_loss=0.5, metrics={"loss": 0.5})
    registry.upsert("def", task="random", status="failed", message="the loss is nan at step 3")
    row = registry.get("abc")
    assert row["status"] == "finished" and row["steps"] == 10 and row["task"] == "addition"
    assert row["commit"] == "f" * 40 and json.loads(row["metrics"]) == {"loss": 0.5}
    assert registry.get("nope") is None
    frame = pd.read_sql("select * from runs", sqlite3.connect(tmp_path / "lab.db"))
    assert sorted(frame["id"]) == ["abc", "def"]
    assert {"id", "task", "mixer", "preset", "status", "steps", "final_loss", "final_val_loss", "final_val_acc",
            "run_dir", "checkpoint_dir", "created_at", "updated_at", "finished_at", "commit"} <= set(frame.columns)
    with pytest.raises(ValueError, match="unknown registry column.*'colour'.*accepted: id, task"):
        registry.upsert("abc", colour="red")


def test_atomic_write_replaces_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "sub" / "file.txt"
    atomic_write_text(target, "one\n")
    assert target.read_text() == "one\n"
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask

    def broken(src, dst):
        raise OSError("disk gone")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="disk gone"):
        atomic_write_text(target, "two\n")
    assert target.read_text() == "one\n"
    assert [p.name for p in target.parent.iterdir()] == ["file.txt"]


def test_code_is_dirty_for_changed_code_not_for_rewritten_records(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    import subprocess

    import falcon_lab.runs

    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(tmp_path), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                       check=True, capture_output=True)

    (tmp_path / "records").mkdir()
    (tmp_path / "code.py").write_text("x = 1\n")
    (tmp_path / "records" / "table.md").write_text("| a |\n")
    git("init", "-q")
    git("add", ".")
    git("commit", "-q", "-m", "one")
    monkeypatch.setattr(falcon_lab.runs, "REPO_ROOT", tmp_path)
    monkeypatch.delenv("LAB_COMMIT", raising=False)
    assert falcon_lab.runs.git_state()["dirty"] is False
    (tmp_path / "records" / "table.md").write_text("| b |\n")
    assert falcon_lab.runs.git_state()["dirty"] is False
    (tmp_path / "code.py").write_text("x = 2\n")
    assert falcon_lab.runs.git_state()["dirty"] is True


def test_provenance_names_code_command_machine_and_versions(tmp_path: Path) -> None:
    info = provenance(["lab", "train", "--preset", "tiny"], run_id="x")
    assert info["command"] == ["lab", "train", "--preset", "tiny"] and info["run_id"] == "x"
    assert info["commit"] is None or re.fullmatch(r"[0-9a-f]{40}", info["commit"])
    assert info["dirty"] in (None, True, False)
    for key in ("hostname", "device", "torch", "lightning", "python", "date"):
        assert info[key], key
    run = RunDir(tmp_path)
    record_provenance(run, info)
    record_provenance(run, {**info, "date": "later"})
    data = json.loads(run.provenance.read_text())
    assert data["date"] == info["date"] and data["resumes"][0]["date"] == "later"


def test_results_root_and_run_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_RESULTS", str(tmp_path))
    assert results_root() == tmp_path.resolve()
    assert run_dir_for("abc").root == tmp_path.resolve() / "runs" / "abc"
    assert run_dir_for("abc", out=tmp_path / "elsewhere").root == (tmp_path / "elsewhere").resolve()


def test_a_run_records_its_folder_and_registry_row_then_skips_when_finished(tmp_path: Path) -> None:
    cfg = tiny()
    run_id = config_hash(cfg)
    result = run_training(cfg, results=tmp_path, progress=False, argv=["lab", "train"])
    run = RunDir(tmp_path / "runs" / run_id)
    assert result.run_dir == run.root and result.status == "finished" and result.steps == 4
    for path in (run.config, run.metrics, run.provenance, run.state, run.last_checkpoint):
        assert path.exists(), path
    assert load_config(config_file=run.config) == cfg
    assert json.loads(run.provenance.read_text())["command"] == ["lab", "train"]
    row = Registry(tmp_path / "lab.db").get(run_id)
    assert row["status"] == "finished" and row["steps"] == 4 and row["mixer"] == "transformer"
    assert row["preset"] == "tiny" and row["run_dir"] == str(run.root) and row["finished_at"]
    assert row["final_loss"] == pytest.approx(result.metrics["loss"])
    assert row["final_val_acc"] == pytest.approx(result.metrics["val_acc"])
    assert row["n_params"] > 0
    stamp = run.last_checkpoint.stat().st_mtime_ns
    again = run_training(cfg, results=tmp_path, progress=False)
    assert again.status == "skipped" and again.steps == 4
    assert run.last_checkpoint.stat().st_mtime_ns == stamp


def test_a_folder_holding_another_configuration_is_refused(tmp_path: Path) -> None:
    run_training(tiny(), out=tmp_path / "run", results=tmp_path, progress=False)
    with pytest.raises(ConfigError, match="holds run .* whose configuration differs .* choose another --out"):
        run_training(tiny("optim.lr=1e-2"), out=tmp_path / "run", results=tmp_path, progress=False)


def test_a_folder_in_use_by_another_training_process_is_refused(tmp_path: Path) -> None:
    cfg = tiny()
    run = RunDir(tmp_path / "run")
    with RunLock(run):
        with pytest.raises(RunBusy, match=rf"run folder {run.root} is in use by another process \(pid {os.getpid()}\)"):
            run_training(cfg, out=run.root, results=tmp_path, progress=False)
    assert not run.config.exists()
    assert run_training(cfg, out=run.root, results=tmp_path, progress=False).status == "finished"
