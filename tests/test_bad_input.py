"""Bad input to the `lab` command line: one line on stderr naming the problem, exit code 2, never a traceback
(a damaged checkpoint or registry, an output path that cannot be written, $LAB_RESULTS naming a file)."""

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import torch

from falcon_lab.config import dump_yaml, load_config

ROOT = Path(__file__).resolve().parents[1]
TRAIN = ["train", "--preset", "addition-tiny", "--max-steps", "2", "--no-progress"]


def cut(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])


def run_folder(tmp: Path, best: Callable[[Path], None] | None = None) -> Path:
    """A run folder of the addition-tiny preset (config.yaml), with checkpoints/best.pt made by `best`."""
    run = tmp / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text(dump_yaml(load_config("addition-tiny", task="addition")))
    if best is not None:
        torch.save({"step": 1, "state_dict": {"w": torch.zeros(1000)}}, run / "checkpoints" / "best.pt")
        best(run / "checkpoints" / "best.pt")
    return run


def empty(path: Path) -> None:
    path.write_bytes(b"")


def empty_checkpoints(tmp: Path) -> list[str]:
    run = run_folder(tmp)
    for name in ("last.ckpt", "previous.ckpt"):
        empty(run / "checkpoints" / name)
    return ["train", "--config", str(run / "config.yaml"), "--out", str(run), "--results", str(tmp), "--no-progress"]


def bad_registry(tmp: Path) -> Path:
    (tmp / "lab.db").write_bytes(b"not a database, " * 500)
    return tmp


def a_file(tmp: Path) -> Path:
    (tmp / "a-file").write_text("x")
    return tmp / "a-file"


CASES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "eval-truncated-best": (lambda t: ["eval", "addition", "--run", str(run_folder(t, cut))],
                            "best.pt cannot be read (RuntimeError"),
    "eval-empty-best": (lambda t: ["eval", "addition", "--run", str(run_folder(t, empty))],
                        "best.pt cannot be read (the file is empty)"),
    "train-empty-checkpoints": (empty_checkpoints, "last.ckpt cannot be read (the file is empty)"),
    "train-out-in-proc": (lambda t: [*TRAIN, "--out", "/proc/nope/run"], "--out /proc/nope/run cannot be written: "
                                                                        "/proc"),
    "lab-results-a-file": (lambda t: [*TRAIN], "lab train: LAB_RESULTS="),
    "train-bad-registry": (lambda t: [*TRAIN, "--results", str(bad_registry(t))], "lab.db cannot be read"),
    "report-runs-bad-registry": (lambda t: ["report", "runs", "--results", str(bad_registry(t))],
                                 "lab.db cannot be read"),
    "reproduce-table-only-bad-registry": (lambda t: ["reproduce", "addition", "--preset", "tiny", "--table-only",
                                                     "--results", str(bad_registry(t))], "lab.db cannot be read"),
    "data-out-under-a-file": (lambda t: ["data", "addition", "--out", str(a_file(t) / "x.jsonl")],
                              "a-file is a file, not a folder"),
    "data-out-in-proc": (lambda t: ["data", "addition", "--out", "/proc/nope/x.jsonl"],
                         "cannot write /proc/nope/x.jsonl: /proc"),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_one_line_on_stderr_and_exit_2(case: str, tmp_path: Path) -> None:
    make, expected = CASES[case]
    args = make(tmp_path)
    env = {**os.environ, "LAB_RESULTS": str(a_file(tmp_path) if case == "lab-results-a-file" else tmp_path / "r")}
    proc = subprocess.run([sys.executable, "-m", "falcon_lab", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=120)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 2 and len(lines) == 1, proc.stderr[-3000:]
    assert expected in lines[0], lines[0]
