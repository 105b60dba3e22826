"""`lab experiment`: the registry of declared experiments, a budget that stops a call with checkpoints and a
resume after it, snapshots of finished runs as an archive and their merge back, and one-line refusals."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tarfile
import threading
import time
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.experiments import experiments, get
from falcon_lab.experiments.declare import Commands, Experiment, Row, RunGrid
from falcon_lab.experiments.runner import Snapshots, declared, run_experiment, run_states
from falcon_lab.reproduce.launch import CODE_ROOT
from falcon_lab.runs import Registry

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, ANSI.sub("", result.output)


def test_names_are_the_records_paths_and_every_experiment_plans_runs() -> None:
    found = experiments()
    assert {"addition-same-time", "addition-tiny", "ablation-tiny"} <= set(found)
    for name, experiment in found.items():
        assert name == experiment.record.replace("/", "-") and experiment.question and experiment.budget_s > 0
        assert experiment.plan() or all(isinstance(p, Commands) and p.commands for p in experiment.parts), name
    same = get("addition-same-time")
    jobs = same.plan()
    assert len(jobs) == 39 and {j.cfg.train.seed for j in jobs} == {0, 1, 2}
    # the runs recorded before the preset's campaign are its plan's (tests/test_reproduce_addition.py)
    assert {"5a049f1a2d", "b75dabe9ce", "b9a12b086b", "852e77770d"} <= {j.run_id for j in jobs}
    code, text = invoke("experiment", "list")
    assert code == 0 and all(re.search(rf"^{n}\s+\d+ (runs|commands)  budget", text, re.M) for n in found), text


def test_the_gpu_settings_change_no_run_id() -> None:
    same = get("addition-same-time")
    assert same.gpu_settings and [j.run_id for j in same.on_gpu().plan()] == [j.run_id for j in same.plan()]


def test_smoke_is_one_seed_of_a_few_rows_at_the_shared_tiny_size() -> None:
    smoke = get("addition-same-time").smoke()
    jobs = smoke.plan()
    assert [j.cfg.mixer for j in jobs] == ["transformer", "retnet"]
    assert all(j.cfg.train.max_steps == 3 and j.cfg.model.d_model == 16 and j.cfg.train.seed == 0 for j in jobs)
    grid = get("ablation-tiny").smoke().plan()
    assert len(grid) == 4 and len({j.run_id for j in grid}) == 4 and len({j.cfg.mixer for j in grid}) == 1


@pytest.mark.parametrize("command", ["run", "status", "report"])
def test_an_unknown_experiment_is_one_line_and_exit_2(command: str, tmp_path: Path) -> None:
    code, text = invoke("experiment", command, "nope", "--results", str(tmp_path))
    assert code == 2 and text.strip().count("\n") == 0, text
    assert "unknown experiment 'nope'; accepted: " in text and "addition-same-time" in text
    assert not (tmp_path / "lab.db").exists()


@pytest.mark.parametrize("option", ["--results", "--snapshot-dir"])
def test_an_unwritable_folder_is_one_line_and_exit_2(option: str, tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    args = ["--results", str(tmp_path / "r")] if option == "--snapshot-dir" else []
    code, text = invoke("experiment", "run", "addition-tiny", "--smoke", *args, option, str(blocker / "sub"))
    assert code == 2 and text.strip().count("\n") == 0 and "cannot be written" in text, text
    assert not (tmp_path / "r").exists()


def test_a_bad_budget_or_snapshot_period_is_one_line_and_exit_2(tmp_path: Path) -> None:
    for args, message in ((["--budget", "0"], "--budget must be > 0"),
                          (["--snapshot-dir", str(tmp_path), "--snapshot-every", "-1"],
                           "--snapshot-every must be > 0")):
        code, text = invoke("experiment", "run", "addition-tiny", "--smoke", *args, "--results", str(tmp_path / "r"))
        assert code == 2 and text.strip().count("\n") == 0 and message in text, text


def test_snapshots_are_taken_every_period_and_once_more_at_the_end() -> None:
    taken: list[float] = []
    with Snapshots(lambda: taken.append(time.monotonic()), every=0.05):
        time.sleep(0.3)
    assert len(taken) >= 3
    errors: list[int] = []

    def fails() -> None:
        errors.append(1)
        raise OSError("disk full")

    with Snapshots(fails, every=10):  # a failed snapshot is a line on stderr, not the campaign's end
        pass
    assert errors == [1]


def test_a_snapshot_holds_the_finished_runs_without_weights_and_merges_back(tmp_path: Path) -> None:
    results, snaps = tmp_path / "a", tmp_path / "snap"
    code, text = invoke("experiment", "run", "addition-tiny", "--smoke", "--results", str(results), "--snapshot-dir",
                        str(snaps))
    assert code == 0, text
    archive = snaps / "addition-tiny.tgz"
    assert f"snapshot: {archive}" in text
    jobs = declared(get("addition-tiny"), smoke=True).plan()
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        manifest = json.loads(tar.extractfile("snapshot.json").read())
    assert manifest["experiment"] == "addition-tiny" and sorted(manifest["runs"]) == sorted(j.run_id for j in jobs)
    assert all(f"runs/{j.run_id}/run.json" in names for j in jobs) and "tables/table.md" in names
    assert not any(n.endswith((".ckpt", ".pt", ".lock")) for n in names)
    assert (results / "runs" / jobs[0].run_id / "checkpoints").is_dir()  # the weights stayed here
    # into another results folder: `lab runs merge ARCHIVE`, then the experiment has nothing to train
    other = tmp_path / "b"
    code, text = invoke("runs", "merge", str(archive), "--results", str(other))
    assert code == 0 and f"{len(jobs)} runs ({len(jobs)} copied)" in text, text
    assert all(s.state == "finished" for s in run_states(jobs, other))
    code, text = invoke("experiment", "run", "addition-tiny", "--smoke", "--results", str(other))
    assert code == 0 and text.count("finished before") == len(jobs), text
    # or merged by the run itself, before it trains
    third = tmp_path / "c"
    code, text = invoke("experiment", "run", "addition-tiny", "--smoke", "--merge", str(archive), "--results",
                        str(third))
    assert code == 0 and text.count("copied") == len(jobs) and text.count("finished before") == len(jobs), text


@pytest.mark.parametrize("how", ["runs merge", "experiment run"])
def test_a_corrupt_snapshot_is_one_line_and_exit_2_with_nothing_written(how: str, tmp_path: Path) -> None:
    good = tmp_path / "good.tgz"
    with tarfile.open(good, "w:gz") as tar:
        tar.add(CODE_ROOT / "pyproject.toml", arcname="runs/x/run.json")
    bad = tmp_path / "bad.tgz"
    bad.write_bytes(good.read_bytes()[:40])
    results = tmp_path / "r"
    args = (["runs", "merge", str(bad)] if how == "runs merge" else
            ["experiment", "run", "addition-tiny", "--smoke", "--merge", str(bad)])
    code, text = invoke(*args, "--results", str(results))
    assert code == 2 and text.strip().count("\n") == 0, text
    assert f"the archive {bad} cannot be read" in text
    assert not (results / "runs").exists()


def test_the_compilation_caches_travel_as_one_archive_to_the_next_machine(tmp_path: Path) -> None:
    """--caches writes <results>/cache as an archive at the end of a call, and a call on another machine (another
    results folder) unpacks it before its runs compile anything; a corrupt one is one line and exit 2."""
    results, caches = tmp_path / "a", tmp_path / "carried" / "caches.tgz"
    kernel = results / "cache" / "triton" / "ab12" / "kernel.cubin"
    kernel.parent.mkdir(parents=True)
    kernel.write_bytes(b"\x7fELF compiled")
    (results / "cache" / "inductor").mkdir()
    (results / "cache" / "inductor" / "fxgraph").write_text("graph", encoding="utf-8")
    caches.parent.mkdir()
    code, text = invoke("experiment", "run", "addition-tiny", "--smoke", "--results", str(results), "--caches",
                        str(caches))
    assert code == 0 and f"caches: {caches}" in text, text
    with tarfile.open(caches) as tar:
        assert {"triton/ab12/kernel.cubin", "inductor/fxgraph"} <= set(tar.getnames())
    other = tmp_path / "b"
    code, text = invoke("experiment", "run", "addition-tiny", "--smoke", "--results", str(other), "--caches",
                        str(caches))
    assert code == 0, text
    assert (other / "cache" / "triton" / "ab12" / "kernel.cubin").read_bytes() == b"\x7fELF compiled"
    bad = tmp_path / "bad.tgz"
    bad.write_bytes(caches.read_bytes()[:30])
    code, text = invoke("experiment", "run", "addition-tiny", "--smoke", "--results", str(tmp_path / "c"),
                        "--caches", str(bad))
    assert code == 2 and text.strip().count("\n") == 0 and f"the archive {bad} cannot be read" in text, text
    assert not (tmp_path / "c" / "runs").exists()
    code, text = invoke("experiment", "run", "addition-tiny", "--smoke", "--results", str(tmp_path / "d"),
                        "--caches", str(tmp_path / "absent" / "caches.tgz"))
    assert code == 2 and "is missing or not writable" in text and not (tmp_path / "d").exists(), text


def test_an_archive_member_outside_its_folder_is_refused(tmp_path: Path) -> None:
    import io

    evil = tmp_path / "evil.tgz"
    with tarfile.open(evil, "w:gz") as tar:
        info = tarfile.TarInfo("../escaped.txt")
        info.size = 1
        tar.addfile(info, io.BytesIO(b"x"))
    code, text = invoke("runs", "merge", str(evil), "--results", str(tmp_path / "r"))
    assert code == 2 and "not a plain file under it" in text and not (tmp_path / "escaped.txt").exists(), text


def test_a_grid_of_single_runs_tables_each_row_over_its_seeds(tmp_path: Path) -> None:
    grid = Experiment(record="test/grid", question="?", budget_s=1, machine="a CPU", trains=RunGrid(
        task="parity", preset="parity-tiny", seeds=2, rows=(
            Row("deltanet β ≤ 1", "deltanet"),
            Row("deltanet β ≤ 2", "deltanet", ("model.mixer_options.beta_max=2.0",)))))
    jobs = grid.smoke().plan()
    assert [j.label for j in jobs] == ["deltanet β ≤ 1", "deltanet β ≤ 2"] and len({j.run_id for j in jobs}) == 2
    ran = run_experiment(grid, tmp_path, smoke=True)
    assert not ran.stopped and ran.campaigns[0].finished == 2
    table = (tmp_path / "experiments" / "test-grid" / "smoke" / "runs.md").read_text()
    assert "| deltanet β ≤ 2 | 1/1 |" in table and "`lab experiment run test-grid --smoke`" in table


def test_a_budget_stops_the_call_at_a_checkpoint_and_the_next_call_resumes(tmp_path: Path) -> None:
    """A run far longer than the budget: the call ends soon after it with exit 0, the run stopped at a step with a
    checkpoint of that step and the snapshot written; the next call resumes that run from its checkpoint."""
    job = get("addition-tiny").plan()[0]
    registry = Registry(tmp_path / "lab.db")
    env = {**os.environ, "PYTHONPATH": str(CODE_ROOT), "OMP_NUM_THREADS": "1"}
    steps = []
    for call in range(2):
        start = time.monotonic()
        done = subprocess.run([sys.executable, "-m", "falcon_lab", "experiment", "run", "addition-tiny", "--budget",
                               "6", "--results", str(tmp_path), "--snapshot-dir", str(tmp_path / "snap")],
                              cwd=CODE_ROOT, env=env, capture_output=True, text=True, timeout=300)
        text = done.stdout + done.stderr
        assert done.returncode == 0, text
        assert "budget of 6 s spent: 0 of 4 planned runs finished" in text, text
        row = registry.get(job.run_id)
        assert row["status"] == "stopped" and 0 < row["steps"] < job.cfg.train.max_steps, (row, text)
        ckpt = tmp_path / "runs" / job.run_id / "checkpoints" / "last.ckpt"
        assert torch.load(ckpt, weights_only=False, map_location="cpu")["global_step"] == row["steps"]
        assert (tmp_path / "snap" / "addition-tiny.tgz").is_file()
        assert registry.get(get("addition-tiny").plan()[1].run_id) is None  # no run started after the budget
        steps.append(row["steps"])
        assert time.monotonic() - start < 240
    assert steps[1] > steps[0]
    info = json.loads((tmp_path / "runs" / job.run_id / "provenance.json").read_text())
    assert info["resumes"][-1]["resumed_from_step"] == steps[0]
    code, text = invoke("experiment", "status", "addition-tiny", "--results", str(tmp_path))
    assert code == 0 and "4 planned, 0 finished, 0 running, 4 missing" in text, text
    assert f"missing   {job.run_id}  transformer seed 0  (step {steps[1]} of 1000)" in text, text


def test_training_left_takes_each_mixers_pace_from_its_finished_runs(tmp_path: Path) -> None:
    """The seconds the runs not finished still need: each at the median pace (train_s a step) of the finished runs
    of its mixer, else of all of them; a stopped run's steps done not counted again; None with no timings."""
    from falcon_lab.experiments.runner import RunState, training_left
    from falcon_lab.runs import RunDir

    jobs = get("addition-tiny").plan()  # transformer and falcon-1.3, two seeds each
    mixers = [j.cfg.mixer for j in jobs]
    assert training_left([RunState(j, "missing", None, 100) for j in jobs], tmp_path) is None
    first = {m: next(j for j in jobs if j.cfg.mixer == m) for m in mixers}
    for job, seconds in ((first[mixers[0]], 50.0), (first[mixers[-1]], 200.0)):
        RunDir(tmp_path / "runs" / job.run_id).write_state(timings={"train_s": seconds})
    states = [RunState(j, "finished" if j in first.values() else "missing", 100 if j in first.values() else 40, 100)
              for j in jobs]
    left, told = training_left(states, tmp_path)
    assert told == 2 and left == pytest.approx(0.5 * 60 + 2.0 * 60)  # 60 steps left each, at 0.5 and 2 s a step


def test_status_finds_a_run_training_now_by_its_lock(tmp_path: Path) -> None:
    from falcon_lab.runs import RunDir, RunLock

    jobs = get("addition-tiny").plan()
    with RunLock(RunDir(tmp_path / "runs" / jobs[1].run_id)):
        states = run_states(jobs, tmp_path)
    assert [s.state for s in states] == ["missing", "running", "missing", "missing"]
    assert not (tmp_path / "lab.db").exists()


def test_a_declared_command_must_name_a_command_and_its_options() -> None:
    from falcon_lab.experiments.declare import check_words

    check_words(("bench", "kernels", "--rep", "50", "--rule", "falcon-1", "--out", "{out}"))
    check_words(("train", "--task", "fineweb", "--set", "a=b", "--no-progress"))
    with pytest.raises(ValueError, match="no command 'kernel'; accepted: .*kernels"):
        check_words(("bench", "kernel", "--rep", "50"))
    with pytest.raises(ValueError, match="no option --reps; accepted: "):
        check_words(("bench", "kernels", "--reps", "50"))


def test_a_command_that_needs_a_gpu_is_checked_not_run_at_its_smoke_size(tmp_path: Path) -> None:
    code, text = invoke("experiment", "run", "bench-kernels-2026-12-05", "--smoke", "--results", str(tmp_path))
    assert code == 0, text
    checked = tmp_path / "experiments" / "bench-kernels-2026-12-05" / "smoke" / "checked.md"
    assert f"table: {checked}" in text and "lab bench kernels --rep 50" in checked.read_text()
    assert not (tmp_path / "experiments" / "bench-kernels-2026-12-05" / "smoke" / "kernels.csv").exists()
