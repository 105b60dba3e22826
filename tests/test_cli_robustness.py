"""The command line under rough handling: SIGTERM, a reader that goes away, a run without best weights,
contradictory or malformed settings, an output folder that cannot be written."""

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.config import ConfigError, load_config
from falcon_lab.reproduce.addition import parse_rows, plan
from falcon_lab.reproduce.launch import CODE_ROOT
from falcon_lab.runs import Registry, RunDir
from falcon_lab.sweep.space import SpaceError, load_space
from falcon_lab.train import run_training

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, ANSI.sub("", result.output)


def lab(*args: str, **kwargs) -> subprocess.Popen:
    """`lab ARGS` in a fresh process, as a shell starts it."""
    env = {**os.environ, "PYTHONPATH": str(CODE_ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.Popen([sys.executable, "-m", "falcon_lab", *args], cwd=CODE_ROOT, env=env, text=True, **kwargs)


def wait_for(what, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while not what():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up after {seconds} s waiting for {what.__doc__}")
        time.sleep(0.2)


def test_sigterm_stops_lab_train_after_its_step_with_a_checkpoint_and_a_non_zero_exit(tmp_path: Path) -> None:
    run = RunDir(tmp_path / "run")
    proc = lab("train", "--preset", "tiny", "--max-steps", "100000", "--set", "train.ckpt_every=2",
               "--out", str(run.root), "--results", str(tmp_path), "--no-progress",
               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)

    def checkpointed() -> bool:
        """the first checkpoint"""
        return proc.poll() is not None or run.read_state().get("steps", 0) >= 2

    wait_for(checkpointed)
    proc.send_signal(signal.SIGTERM)
    text = proc.communicate(timeout=120)[0]
    assert proc.returncode == 128 + signal.SIGTERM, text
    assert "SIGTERM: stopping after this step" in text
    state = run.read_state()
    assert state["status"] == "stopped" and 2 <= state["steps"] < 100000, text
    assert torch.load(run.last_checkpoint, weights_only=False)["global_step"] == state["steps"]
    assert max(int(line.split(",")[0]) for line in run.metrics.read_text().splitlines()[1:]) == state["steps"]


@pytest.mark.parametrize("gpus", ["1", "2"], ids=["in-process", "child-processes"])
def test_sigterm_to_lab_reproduce_stops_its_runs_at_a_checkpoint(gpus: str, tmp_path: Path) -> None:
    """With --gpus 2 the one run is a child `lab train`, passed the signal; with 1 it trains in the campaign."""
    settings = ["--set", "train.ckpt_every=2"]
    (job,) = plan("tiny", parse_rows("deltanet"), 1, 100000, overrides=["train.ckpt_every=2"])
    proc = lab("reproduce", "addition", "--preset", "tiny", "--rows", "deltanet", "--max-steps", "100000",
               "--gpus", gpus, *settings, "--results", str(tmp_path), "--out", str(tmp_path / "t"),
               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    registry = Registry(tmp_path / "lab.db")

    def checkpointed() -> bool:
        """the run's first checkpoint"""
        row = (tmp_path / "lab.db").exists() and registry.get(job.run_id)
        return proc.poll() is not None or bool(row and (row.get("steps") or 0) >= 2)

    wait_for(checkpointed)
    proc.send_signal(signal.SIGTERM)  # the campaign alone, not its process group
    text = proc.communicate(timeout=120)[0]
    assert proc.returncode != 0, text
    row = registry.get(job.run_id)
    assert row["status"] == "stopped" and 2 <= row["steps"] < 100000, (row, text)
    ckpt = tmp_path / "runs" / job.run_id / "checkpoints" / "last.ckpt"
    assert torch.load(ckpt, weights_only=False)["global_step"] == row["steps"]


def test_a_closed_stdout_does_not_fail_the_run(tmp_path: Path) -> None:
    """`lab train ... | head -1`: the lines after the reader has gone are dropped, the run finishes."""
    run = RunDir(tmp_path / "run")
    proc = lab("train", "--preset", "tiny", "--task", "random", "--max-steps", "30", "--set", "train.val_every=1",
               "--out", str(run.root), "--results", str(tmp_path), "--no-progress",
               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout.readline().startswith("step 1/30")
    proc.stdout.close()
    err = proc.stderr.read()
    assert proc.wait(timeout=120) == 0, err
    assert "BrokenPipeError" not in err
    assert run.read_state()["status"] == "finished"


def test_eval_falls_back_to_the_last_weights_of_a_run_without_best_ones(tmp_path: Path) -> None:
    cfg = load_config("tiny", overrides=["train.max_steps=3", "train.ckpt_every=3", "train.val_every=3"])
    assert not cfg.eval.enabled  # no addition evaluation, so no best weights
    run_training(cfg, out=tmp_path / "run", results=tmp_path, progress=False)
    args = ["eval", "addition", "--run", str(tmp_path / "run"), "--per-n", "1", "--free-per-n", "0"]
    code, text = invoke(*args)
    assert code == 0, text
    assert "has no best weights" in text and "evaluating its last ones, last.ckpt at step 3" in text
    assert "(last weights: last.ckpt, step 3;" in text
    code, text = invoke(*args, "--which", "best")  # asked for by name: no fall-back
    assert code == 2 and "has no checkpoints/best.pt" in text


def test_max_steps_beside_a_bad_set_value_is_an_error_naming_the_value(tmp_path: Path) -> None:
    code, text = invoke("train", "--max-steps", "3", "--set", "train.max_steps=abc", "--out", str(tmp_path / "run"),
                        "--results", str(tmp_path))
    assert code == 2 and "train.max_steps expects int, got 'abc'" in text
    assert not (tmp_path / "run").exists()


def test_a_malformed_config_file_is_named_with_its_line_and_column(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  max_steps: 5\n  batch_size: [16\nmodel:\n  d_model: 32\n")
    code, text = invoke("train", "--config", str(bad), "--out", str(tmp_path / "run"), "--results", str(tmp_path))
    assert code == 2, text
    assert re.search(rf"config file {re.escape(str(bad))} is not valid YAML: line \d+, column \d+: ", text), text
    with pytest.raises(ConfigError, match=r"line 3, column 2: "):
        (tmp_path / "indent.yaml").write_text("train:\n  max_steps: 5\n model: {}\n")
        load_config(config_file=tmp_path / "indent.yaml")
    space = tmp_path / "space.yaml"
    space.write_text("params:\n  lr: {type: float, low: 1e-4, high: 1e-2\n")
    with pytest.raises(SpaceError, match=r"not valid YAML: line \d+, column \d+: "):
        load_space(space)


@pytest.mark.parametrize("command", [["train", "--max-steps", "2"], ["reproduce", "addition", "--preset", "tiny"],
                                     ["ablate", "alignment", "--preset", "tiny"], ["bench", "train"],
                                     ["plot", "addition"]], ids=lambda c: " ".join(c[:2]))
def test_an_unwritable_out_exits_2_naming_it(command: list[str], tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    code, text = invoke(*command, "--out", str(blocker / "out"))
    assert code == 2, text
    assert text == f"lab {command[0]}: --out {blocker / 'out'} cannot be written: {blocker} is a file, not a folder\n"
    assert blocker.read_text() == ""
