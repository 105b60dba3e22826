"""Faults: a killed or stopped run resumes onto the very loss curve of an uninterrupted one; a NaN or
inf stops the run naming the step and keeps the last good checkpoint; checkpoints are atomic."""

import json
import math
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
import torch
from lightning.pytorch.callbacks import Callback
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.config import ConfigError, dump_yaml, load_config
from falcon_lab.eval.run_weights import load_run_model
from falcon_lab.runs import Registry, RunDir
from falcon_lab.train import LabModule, RunFailed, run_training
from falcon_lab.train.callbacks import read_metrics
from falcon_lab.train.checkpoint_io import AtomicCheckpointIO
from tests.train_util import StopAt

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = ["train.max_steps=12", "train.log_every=1", "train.ckpt_every=4", "train.val_every=6",
            "optim.warmup_steps=3"]


def tiny(*overrides: str):
    return load_config("tiny", overrides=[*SETTINGS, *overrides])


def losses(run_dir: Path) -> dict[int, float]:
    return {r["step"]: r["loss"] for r in read_metrics(run_dir / "metrics.csv") if "loss" in r}


def assert_same_curve(resumed: Path, reference: Path, steps: int) -> None:
    a, b = losses(resumed), losses(reference)
    assert sorted(a) == sorted(b) == list(range(1, steps + 1))
    worst = max(abs(a[s] - b[s]) for s in a)
    assert worst <= 1e-6, f"resumed and uninterrupted losses differ by {worst}"


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The uninterrupted 12-step run."""
    root = tmp_path_factory.mktemp("reference")
    run_training(tiny(), out=root / "run", results=root, progress=False)
    return root / "run"


def test_a_stopped_run_resumes_onto_the_uninterrupted_curve(reference: Path, tmp_path: Path) -> None:
    cfg = tiny()
    first = run_training(cfg, out=tmp_path / "run", results=tmp_path, progress=False, callbacks=[StopAt(7)])
    assert first.status == "stopped" and first.steps == 7
    assert Registry(tmp_path / "lab.db").get(first.run_id)["status"] == "stopped"
    second = run_training(cfg, out=tmp_path / "run", results=tmp_path, progress=False)
    assert second.status == "finished" and second.resumed_from == 7 and second.steps == 12
    assert_same_curve(tmp_path / "run", reference, 12)
    final = torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    expected = torch.load(reference / "checkpoints" / "last.ckpt", weights_only=False)["state_dict"]
    for name, value in expected.items():
        torch.testing.assert_close(final[name], value, rtol=0, atol=1e-6)


class InterruptAt(Callback):
    """Sends this process `signum` at `step`, as `timeout`, Ctrl-C (SIGINT) or a scheduler (SIGTERM) would."""

    def __init__(self, step: int, signum: int = signal.SIGINT) -> None:
        self.step, self.signum = step, signum

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        if trainer.global_step == self.step:
            os.kill(os.getpid(), self.signum)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_run_stops_at_that_step_with_a_checkpoint_and_resumes_onto_the_same_curve(
        reference: Path, tmp_path: Path, signum: int) -> None:
    cfg = tiny()  # checkpoints every 4 steps: step 6 has none of its own
    before = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    first = run_training(cfg, out=tmp_path / "run", results=tmp_path, progress=False,
                         callbacks=[InterruptAt(6, signum)], stop_on_interrupt=True)
    # the handlers live only as long as the run
    assert {s: signal.getsignal(s) for s in before} == before
    assert first.status == "stopped" and first.steps == 6 and first.signum == signum
    assert Registry(tmp_path / "lab.db").get(first.run_id)["status"] == "stopped"
    assert RunDir(tmp_path / "run").read_state()["steps"] == 6
    assert torch.load(tmp_path / "run" / "checkpoints" / "last.ckpt", weights_only=False)["global_step"] == 6
    second = run_training(cfg, out=tmp_path / "run", results=tmp_path, progress=False)
    assert second.status == "finished" and second.resumed_from == 6 and second.steps == 12
    assert_same_curve(tmp_path / "run", reference, 12)


def test_a_repeated_interrupt_within_the_grace_is_one_and_a_late_one_aborts() -> None:
    from falcon_lab.train.callbacks import StopOnInterrupt

    stopper = StopOnInterrupt(grace=0.2)
    stopper.request()
    stopper.request()  # the launcher passing on the signal its process group already got
    time.sleep(0.3)
    with pytest.raises(KeyboardInterrupt):
        stopper.request()


KILLED_RUN = """
import os, signal, sys
import torch
from lightning.pytorch.callbacks import Callback
from falcon_lab.config import load_config
from falcon_lab.train import run_training
from falcon_lab.train.callbacks import MetricsLogger

torch.set_num_threads({threads})

class KillAt(Callback):
    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx):
        if trainer.global_step == {kill_at}:
            # As a timed flush might have done: rows past the checkpoint reach the file first.
            next(c for c in trainer.callbacks if isinstance(c, MetricsLogger)).flush(trainer)
            os.kill(os.getpid(), signal.SIGKILL)

run_training(load_config(config_file=sys.argv[1]), out=sys.argv[2], results=sys.argv[3], progress=False,
             callbacks=[KillAt()])
"""


def test_a_killed_run_resumes_from_its_last_checkpoint_onto_the_same_curve(reference: Path, tmp_path: Path) -> None:
    cfg = tiny()
    config, out = tmp_path / "config.yaml", tmp_path / "run"
    config.write_text(dump_yaml(cfg))
    script = tmp_path / "killed_run.py"
    # Killed at step 6: the checkpoint of step 4 exists, steps 5-6 are lost with the process.
    script.write_text(textwrap.dedent(KILLED_RUN).format(threads=torch.get_num_threads(), kill_at=6))
    env = {**os.environ, "OMP_NUM_THREADS": str(torch.get_num_threads())}
    proc = subprocess.run([sys.executable, str(script), str(config), str(out), str(tmp_path)],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    run = RunDir(out)
    assert run.read_state()["status"] == "running" and run.read_state()["steps"] == 4
    assert Registry(tmp_path / "lab.db").get(run.read_state()["id"])["steps"] == 4
    assert not [p for p in run.checkpoints.iterdir() if p.name != "last.ckpt"]  # no temp file left
    assert max(losses(out)) == 6  # rows past the checkpoint, which the resumed run must drop and redo

    proc = subprocess.run([sys.executable, "-m", "falcon_lab", "train", "--config", str(config), "--out", str(out),
                           "--results", str(tmp_path), "--no-progress"],
                          cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "finished (resumed at step 4, 12 steps)" in proc.stdout
    assert_same_curve(out, reference, 12)
    resumes = json.loads(run.provenance.read_text())["resumes"]
    assert len(resumes) == 1 and resumes[0]["resumed_from_step"] == 4
    assert Registry(tmp_path / "lab.db").get(run.read_state()["id"])["status"] == "finished"


def poison_logits_at(monkeypatch: pytest.MonkeyPatch, step: int, value: float) -> None:
    forward = LabModule.forward

    def poisoned(self, input_ids):
        logits = forward(self, input_ids)
        return logits * value if self.training and self.global_step + 1 == step else logits

    monkeypatch.setattr(LabModule, "forward", poisoned)


@pytest.mark.parametrize("value", [math.nan, math.inf])
def test_a_non_finite_loss_fails_the_run_naming_the_step(value: float, tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    poison_logits_at(monkeypatch, 6, value)
    cfg = tiny()
    with pytest.raises(RunFailed, match=r"the loss is (nan|inf) at step 6; .*last good checkpoint: .*\(step 4\)"):
        run_training(cfg, out=tmp_path / "run", results=tmp_path, progress=False)
    run = RunDir(tmp_path / "run")
    state = run.read_state()
    assert state["status"] == "failed" and state["steps"] == 4 and "step 6" in state["message"]
    row = Registry(tmp_path / "lab.db").get(state["id"])
    assert row["status"] == "failed" and "at step 6" in row["message"]
    ckpt = torch.load(run.last_checkpoint, weights_only=False)
    assert ckpt["global_step"] == 4
    assert all(torch.isfinite(t).all() for t in ckpt["state_dict"].values())
    assert max(losses(run.root)) == 5
    # the weights at the failure (step 6 flagged and skipped): kept for a look at what diverged
    assert "its weights after step 6 (the flagged step not applied): " in state["message"] and run.failed_weights.name in state["message"]
    failed = load_run_model(run.root, "failed")
    assert failed.step == 6 and failed.which == "failed"
    assert all(torch.isfinite(p).all() for p in failed.model.parameters())
    kept = torch.load(run.failed_weights, weights_only=True)
    assert kept["metrics"]["failed_step"] == 6 and not math.isfinite(kept["metrics"]["loss"])


def test_a_non_finite_loss_between_checks_is_caught_at_the_next_one_and_never_applied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The flag stays on the device until a logged step or a checkpoint reads it: with log_every 5 and
    # ckpt_every 4, a NaN at step 6 is read at the checkpoint of step 8, which is then not written.
    seen: dict[int, torch.Tensor] = {}
    step_end = LabModule.on_train_batch_end

    def record(self, outputs, batch, batch_idx):
        seen[self.global_step] = self.model.embed.weight.detach().clone()
        return step_end(self, outputs, batch, batch_idx)

    monkeypatch.setattr(LabModule, "on_train_batch_end", record)
    poison_logits_at(monkeypatch, 6, math.nan)
    with pytest.raises(RunFailed, match=r"the loss is nan at step 6; .*last good checkpoint: .*\(step 4\)"):
        run_training(tiny("train.log_every=5"), out=tmp_path / "run", results=tmp_path, progress=False)
    ckpt = torch.load(RunDir(tmp_path / "run").last_checkpoint, weights_only=False)
    assert ckpt["global_step"] == 4
    # the flagged step was skipped by the optimiser (fused AdamW's found_inf): the weights did not move;
    # training went on, with finite weights, until step 8's checkpoint callback read the flag (before
    # this module hook of step 8 ran)
    assert torch.equal(seen[6], seen[5])
    assert max(seen) == 7 and not torch.equal(seen[7], seen[6])
    assert all(torch.isfinite(w).all() for w in seen.values())


def test_a_non_finite_gradient_fails_the_run_before_the_update(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    forward = LabModule.forward

    def infinite_gradient(self, input_ids):
        logits = forward(self, input_ids)
        if self.training and self.global_step + 1 == 3:
            # sqrt has an infinite slope at 0: the loss stays finite, the gradient does not.
            logits = logits + torch.sqrt(self.model.embed.weight.sum() * 0)
        return logits

    monkeypatch.setattr(LabModule, "forward", infinite_gradient)
    with pytest.raises(RunFailed, match=r"the gradient norm is (nan|inf) at step 3"):
        run_training(tiny("train.ckpt_every=2"), out=tmp_path / "run", results=tmp_path, progress=False)
    ckpt = torch.load(RunDir(tmp_path / "run").last_checkpoint, weights_only=False)
    assert ckpt["global_step"] == 2
    assert all(torch.isfinite(t).all() for t in ckpt["state_dict"].values())


def test_lab_train_reports_a_failed_run_in_one_line_with_exit_1(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    poison_logits_at(monkeypatch, 2, math.nan)
    result = CliRunner().invoke(app, ["train", "--max-steps", "4", "--out", str(tmp_path / "run"),
                                      "--results", str(tmp_path), "--no-progress"])
    assert result.exit_code == 1
    assert result.output.count("\n") == 1 and "Traceback" not in result.output
    assert "lab train: run " in result.output and "the loss is nan at step 2" in result.output


def test_checkpoints_are_replaced_whole_or_not_at_all(tmp_path: Path) -> None:
    io = AtomicCheckpointIO()
    path = tmp_path / "ckpt" / "last.ckpt"
    io.save_checkpoint({"step": 1, "w": torch.ones(3)}, path)
    with pytest.raises(Exception):
        io.save_checkpoint({"step": 2, "w": torch.zeros(3), "bad": lambda: None}, path)  # cannot be pickled
    assert io.load_checkpoint(path, weights_only=True)["step"] == 1
    assert [p.name for p in path.parent.iterdir()] == ["last.ckpt"]


def cut(path: Path, keep: float = 0.5) -> None:
    """Truncate a file to a part of its length, as a full disk or a copy cut short leaves it."""
    data = path.read_bytes()
    path.write_bytes(data[:int(len(data) * keep)])


def test_a_resume_past_a_truncated_checkpoint_keeps_every_row_and_starts_from_the_previous_one(
        reference: Path, tmp_path: Path) -> None:
    cfg = tiny()  # checkpoints at step 4 and, stopped, at 7
    config, out = tmp_path / "config.yaml", tmp_path / "run"
    config.write_text(dump_yaml(cfg))
    first = run_training(cfg, out=out, results=tmp_path, progress=False, callbacks=[StopAt(7)])
    assert first.status == "stopped"
    run = RunDir(out)
    assert torch.load(run.previous_checkpoint, weights_only=False)["global_step"] == 4
    before = (out / "metrics.csv").read_text().splitlines()
    assert max(losses(out)) == 7
    cut(run.last_checkpoint)

    result = CliRunner().invoke(app, ["train", "--config", str(config), "--out", str(out),
                                      "--results", str(tmp_path), "--no-progress"])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output
    warning = [line for line in result.stderr.splitlines() if line]
    assert len(warning) == 1 and "last.ckpt cannot be read" in warning[0]
    assert "resuming from previous.ckpt (step 4)" in warning[0]
    assert "finished (resumed at step 4, 12 steps)" in result.stdout
    assert (run.checkpoints / "last.ckpt.unreadable").exists()  # set aside, not deleted
    after = (out / "metrics.csv").read_text().splitlines()
    assert after[:5] == before[:5]  # the header and the rows of steps 1-4, as written
    assert_same_curve(out, reference, 12)  # steps 5-7 written again onto the same curve, then 8-12
    tokens = [r["tokens"] for r in read_metrics(out / "metrics.csv") if "tokens" in r]
    expected = [r["tokens"] for r in read_metrics(reference / "metrics.csv") if "tokens" in r]
    assert tokens == expected  # the column continues from the restored step
    resumes = json.loads(run.provenance.read_text())["resumes"]
    assert [r["resumed_from_step"] for r in resumes] == [4]


def test_a_failed_start_leaves_the_metrics_file_as_it_was(tmp_path: Path) -> None:
    cfg = tiny()
    out = tmp_path / "run"
    run_training(cfg, out=out, results=tmp_path, progress=False, callbacks=[StopAt(5)])
    run = RunDir(out)
    before = (out / "metrics.csv").read_bytes()
    state = run.read_state()
    run.last_checkpoint.write_bytes(b"")
    cut(run.previous_checkpoint, 0.9)
    with pytest.raises(ConfigError, match=r"last.ckpt cannot be read \(the file is empty\).*previous.ckpt cannot be "
                                          r"read .*move the folder"):
        run_training(cfg, out=out, results=tmp_path, progress=False)
    assert (out / "metrics.csv").read_bytes() == before
    assert run.read_state() == state
