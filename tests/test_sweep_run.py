"""`lab sweep run` and `lab sweep report` end to end on a CPU: tiny models that really train, trials
in their own run folders, workers sharing one study (journal file, and PostgreSQL when
LAB_TEST_POSTGRES_URL is set), a killed worker's trial failed and the budget completed by a rerun, and
the report with a best configuration that `lab train --config` reads."""

import json
import math
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from types import SimpleNamespace

import optuna
import pytest
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.config import load_config
from falcon_lab.sweep.storage import open_storage, worker_alive
from tests.xdist_util import built_once

POSTGRES = os.environ.get("LAB_TEST_POSTGRES_URL")
REPO = Path(__file__).resolve().parents[1]

TINY_SPACE = """\
preset: addition-tiny
mixer: falcon-1a
fixed:
  train.max_steps: {steps}
  train.val_every: {val_every}
  train.log_every: 2
  train.ckpt_every: 100
  eval.n_per_length: 1
  eval.free_per_length: 0
params:
  lr: {{key: optim.lr, type: float, low: 1.0e-3, high: 3.0e-2, log: true}}
  qk_norm: {{key: model.mixer_options.qk_norm, type: categorical, choices: [rmsnorm, l2]}}
"""


def tiny_space(folder: Path, steps: int = 6, val_every: int = 2) -> Path:
    path = folder / "tiny.yaml"
    path.write_text(TINY_SPACE.format(steps=steps, val_every=val_every))
    return path


def sweep(*args: str):
    """`lab sweep ARGS` in this process (its workers are processes of their own); the CliRunner result."""
    return CliRunner().invoke(app, ["sweep", *args])


def trials_of(storage: str, study: str) -> list[optuna.trial.FrozenTrial]:
    return optuna.load_study(study_name=study, storage=open_storage(storage)).get_trials()


@pytest.fixture(scope="module", autouse=True)
def one_thread_per_worker():
    """Workers inherit the environment: one thread each on the small shared test machines."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("OMP_NUM_THREADS", "1")
        yield


@pytest.fixture(scope="module")
def three_trials(tmp_path_factory: pytest.TempPathFactory):
    """A three-trial sweep and what `lab sweep run` said, made once for the session's workers."""
    with built_once(tmp_path_factory, "sweep") as (folder, build):
        if build:
            space = tiny_space(folder)
            done = sweep("run", str(space), "--trials", "3", "--results", str(folder / "results"), "--seed", "3")
            (folder / "done.json").write_text(json.dumps(
                {"exit_code": done.exit_code, "output": done.output, "stdout": done.stdout}))
    return folder, SimpleNamespace(**json.loads((folder / "done.json").read_text()))


def test_a_three_trial_sweep_trains_each_trial_in_its_own_run_folder(three_trials) -> None:
    folder, done = three_trials
    assert done.exit_code == 0, done.output
    study_dir = folder / "results" / "sweeps" / "tiny"
    trials = trials_of(str(study_dir / "journal.log"), "tiny")
    assert [t.number for t in trials] == [0, 1, 2]
    for t in trials:
        assert t.state == optuna.trial.TrialState.COMPLETE and math.isfinite(t.value)
        run = study_dir / "trials" / str(t.number)
        assert (run / "config.yaml").exists() and (run / "evals.csv").exists()
        cfg = load_config(config_file=run / "config.yaml")
        assert cfg.optim.lr == pytest.approx(t.params["lr"]) and cfg.mixer == "falcon-1a"
        assert cfg.model.mixer_options["qk_norm"] == t.params["qk_norm"] and cfg.eval.enabled
        assert t.user_attrs["steps"] == 6 and t.user_attrs["tokens_per_s"] > 0
        assert t.value == t.user_attrs["metrics"]["best_val_acc"]  # the default objective: widths 1-32
        assert sorted(t.intermediate_values) == [2, 4, 6]  # val_acc at each evaluation, for the pruner
    echoed = [line for line in done.stdout.splitlines() if line.startswith("trial ")]
    assert len(echoed) == 3 and all(" complete " in line for line in echoed)
    assert "3 complete (budget 3)" in done.stdout


def test_rerunning_a_finished_sweep_runs_nothing_and_other_settings_are_refused(three_trials) -> None:
    folder, _ = three_trials
    space, results = str(folder / "tiny.yaml"), str(folder / "results")
    again = sweep("run", space, "--trials", "3", "--results", results)
    assert again.exit_code == 0 and "has used its budget of 3 trials; nothing to run" in again.stdout
    other = sweep("run", space, "--trials", "3", "--results", results, "--objective", "ood_mean")
    assert other.exit_code == 2
    assert "tunes on the test set" in other.output  # the held-out objective is named as such
    assert "study 'tiny' was made with --objective 'val_acc', this command gives 'ood_mean'" in other.output
    assert len(trials_of(str(folder / "results" / "sweeps" / "tiny" / "journal.log"), "tiny")) == 3


def test_the_report_draws_the_study_and_writes_a_best_config_lab_train_reads(three_trials) -> None:
    folder, _ = three_trials
    result = sweep("report", "tiny", "--results", str(folder / "results"))
    assert result.exit_code == 0, result.output
    out = folder / "results" / "sweeps" / "tiny"
    for name in ("history.png", "slice.png", "contour.png", "intermediate.png", "trials.csv", "report.md"):
        assert (out / name).stat().st_size > 0, name
    text = (out / "report.md").read_text()
    assert "importances.png" in text or "importances: not drawn" in text
    for needle in ("## Best", "## Trials by state", "| COMPLETE | 3 |", "lab sweep run", "commit", "hardware"):
        assert needle in text, needle
    best = optuna.load_study(study_name="tiny", storage=open_storage(str(out / "journal.log"))).best_trial
    cfg = load_config(config_file=out / "best.yaml")
    assert "# Train it again: lab train --config results/sweeps/tiny/best.yaml\n" in (out / "best.yaml").read_text()
    assert cfg.optim.lr == pytest.approx(best.params["lr"])
    assert cfg.model.mixer_options["qk_norm"] == best.params["qk_norm"]
    assert cfg == load_config(config_file=out / "trials" / str(best.number) / "config.yaml")


def _shared_study(tmp_path: Path, storage: list[str], study: str) -> list[optuna.trial.FrozenTrial]:
    space = tiny_space(tmp_path, steps=12, val_every=6)
    done = sweep("run", str(space), "--trials", "4", "--workers", "2", "--study", study,
                 "--results", str(tmp_path / "results"), *storage)
    assert done.exit_code == 0, done.output
    return trials_of(storage[1] if storage else str(tmp_path / "results" / "sweeps" / study / "journal.log"), study)


def _check_shared(trials: list[optuna.trial.FrozenTrial]) -> None:
    assert sorted(t.number for t in trials) == [0, 1, 2, 3]  # unique, none lost, none beyond the budget
    assert all(t.state == optuna.trial.TrialState.COMPLETE for t in trials)
    workers = {t.user_attrs["worker"] for t in trials}
    assert len(workers) == 2, workers  # both workers ran trials of the one study
    folders = {t.user_attrs["run_dir"] for t in trials}
    assert len(folders) == 4


def test_two_workers_share_one_journal_study_without_duplicate_or_lost_trials(tmp_path: Path) -> None:
    _check_shared(_shared_study(tmp_path, [], "shared"))


@pytest.mark.skipif(POSTGRES is None, reason="LAB_TEST_POSTGRES_URL is not set (CI starts a PostgreSQL server)")
def test_two_workers_share_one_postgresql_study(tmp_path: Path) -> None:
    study = f"shared-{uuid.uuid4().hex[:12]}"
    _check_shared(_shared_study(tmp_path, ["--storage", POSTGRES], study))


def test_a_killed_worker_leaves_a_failed_trial_and_the_rerun_completes_the_budget(tmp_path: Path) -> None:
    space = tiny_space(tmp_path, steps=60, val_every=30)
    journal = tmp_path / "results" / "sweeps" / "tiny" / "journal.log"
    args = ["run", str(space), "--trials", "2", "--results", str(tmp_path / "results")]
    parent = subprocess.Popen([sys.executable, "-m", "falcon_lab", "sweep", *args], cwd=REPO, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
    try:
        deadline, victim = time.time() + 120, None
        while victim is None and time.time() < deadline and parent.poll() is None:
            time.sleep(0.2)
            if journal.exists():
                running = [t for t in trials_of(str(journal), "tiny")
                           if t.state == optuna.trial.TrialState.RUNNING and "run_dir" in t.user_attrs]
                victim = running[0] if running else None
        assert victim is not None, "no running trial seen"
        worker = victim.user_attrs["worker"]
        assert worker_alive(worker)
        os.kill(int(worker.rsplit(":", 2)[1]), signal.SIGKILL)
        output, _ = parent.communicate(timeout=120)
    finally:
        if parent.poll() is None:
            parent.kill()
    assert parent.returncode == 1, output
    assert f"trial {victim.number}: its worker is gone; marked FAIL" in output and "signal 9" in output
    failed = trials_of(str(journal), "tiny")[victim.number]
    assert failed.state == optuna.trial.TrialState.FAIL and failed.user_attrs["error"].startswith("worker lost")
    rerun = sweep(*args)
    assert rerun.exit_code == 0, rerun.output
    trials = trials_of(str(journal), "tiny")
    assert len(trials) == 2  # the failed trial counts toward the budget, once
    states = sorted(t.state.name for t in trials)
    assert states == ["COMPLETE", "FAIL"]
