"""Commands write under the results folder, never into records/: the committed evidence stays as committed."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

import falcon_lab.paths
from falcon_lab.cli import app
from falcon_lab.paths import REPO_ROOT, inside_records, records_root, results_root

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, ANSI.sub("", result.output)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    """Every file under `folder` with its size and modification time."""
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


def git_status() -> str | None:
    """`git status --porcelain` of the checkout (untracked files included), or None outside a git checkout."""
    if shutil.which("git") is None or not (REPO_ROOT / ".git").exists():
        return None
    proc = subprocess.run(["git", "-C", str(REPO_ROOT), "status", "--porcelain", "--untracked-files=all"],
                          capture_output=True, text=True, timeout=60)
    return proc.stdout if proc.returncode == 0 else None


def test_the_default_results_folder_is_the_checkouts_ignored_results(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LAB_RESULTS", raising=False)
    assert results_root() == REPO_ROOT / "results"
    assert records_root() == REPO_ROOT / "records" and (records_root() / "README.md").exists()
    assert inside_records(records_root() / "addition" / "table.md")
    assert not inside_records(results_root() / "addition" / "table.md")
    if git_status() is None:
        pytest.skip("not a git checkout")
    for path, ignored in (("results/addition/table.md", True), ("results/runs/x/metrics.csv", True),
                          ("results/lab.db", True), ("records/addition/table.md", False)):
        proc = subprocess.run(["git", "-C", str(REPO_ROOT), "check-ignore", "-q", "--no-index", path], timeout=60)
        assert proc.returncode == (0 if ignored else 1), f"{path} must {'' if ignored else 'not '}be ignored by git"


def test_lab_results_moves_every_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LAB_RESULTS", str(tmp_path / "elsewhere"))
    assert results_root() == (tmp_path / "elsewhere").resolve()


@pytest.mark.slow
def test_commands_write_under_the_results_folder_and_leave_records_alone(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With LAB_RESULTS unset, a checkout's commands write under its results/: here a stand-in checkout, so the
    test leaves the real results/ alone. The real records/ and the checkout's git status stay as they were."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    (checkout / "pyproject.toml").write_text("")
    monkeypatch.delenv("LAB_RESULTS", raising=False)
    monkeypatch.setattr(falcon_lab.paths, "REPO_ROOT", checkout)
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    results = checkout / "results"
    assert results_root() == results
    records_before, status_before = snapshot(REPO_ROOT / "records"), git_status()

    steps = ["--set", "train.max_steps=2", "--set", "train.log_every=1"]
    commands = [
        ("data", "addition", "--split", "val", "--digits", "1-3", "--n-per-length", "2"),
        ("train", "--task", "addition", "--mixer", "transformer", "--preset", "addition-tiny", *steps),
        ("reproduce", "addition", "--preset", "tiny", "--rows", "transformer", "--max-steps", "2"),
        ("plot", "addition", "--table", str(results / "addition" / "tiny"), "--train-widths", "1-8"),
        ("bench", "train", "--preset", "tiny", "--mixers", "transformer", "--max-steps", "2"),
        ("bench", "step", "--preset", "tiny", "--mixers", "transformer", "--steps", "1"),
        ("runs", "merge", str(REPO_ROOT / "records" / "addition" / "nope-6000-ema" / "runs")),
        ("report", "runs"),
        # two of the report's sections: the others draw a figure per records folder, 90 s on one core, and
        # write where these do (test_report_all draws every section from a small copy of the records)
        ("report", "all", "--records", str(REPO_ROOT / "records"), "--section", "addition", "--section", "kernels"),
    ]
    for command in commands:
        code, out = invoke(*command)
        assert code == 0, f"lab {' '.join(command)}:\n{out}"

    for made in ("data/addition/val.jsonl", "lab.db", "addition/tiny/table.md", "addition/tiny/per_width.png",
                 "bench/train/train.md", "bench/step/step.md", "runs/bench-train/transformer/metrics.csv",
                 "REPORT.md", "report/kernels.png"):
        assert (results / made).exists(), made
    assert len([p for p in (results / "runs").iterdir() if (p / "run.json").exists()]) >= 3
    assert snapshot(REPO_ROOT / "records") == records_before
    assert git_status() == status_before


def test_a_sweep_never_appends_to_a_study_in_records(tmp_path: Path) -> None:
    space = tmp_path / "tiny.yaml"
    space.write_text("preset: tiny\nparams:\n  lr: {key: optim.lr, type: float, low: 1.0e-4, high: 1.0e-2, log: true}\n")
    journal = records_root() / "sweeps" / "rules" / "journal.log"
    before = journal.stat() if journal.exists() else None
    for extra in (["--storage", str(journal)], ["--results", str(records_root())]):
        code, out = invoke("sweep", "run", str(space), "--study", "rules", "--trials", "1", *extra)
        assert code == 2 and "records/" in out and "never appended to" in out, out
    after = journal.stat() if journal.exists() else None
    assert (before and (before.st_size, before.st_mtime_ns)) == (after and (after.st_size, after.st_mtime_ns))
    assert not os.path.exists(records_root() / "sweeps" / "tiny")
