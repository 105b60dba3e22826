"""`lab bench gpu-check`: the rules' fused kernels (falcon-1/2 by default) against the float64 chunk form, then timed."""

import json
import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from falcon_lab.cli import app

ANSI = re.compile(r"\x1b\[[0-9;]*m")
TOLERANCE = {"torch.bfloat16": 1e-2, "torch.float32": 1e-3}  # records/bench/gpu_check_regression.md


def gpu_check(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["bench", "gpu-check", *args])
    return result.exit_code, ANSI.sub("", result.output)


def checked_rows(log: Path) -> list[dict]:
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert not [r for r in rows if "error" in r], rows
    return [r for r in rows if "check" in r]


def assert_within_tolerance(rows: list[dict]) -> None:
    assert {r["check"] for r in rows} == {"falcon-1", "falcon-2"}
    for r in rows:
        worst = max(r[k] for k in ("o", "S", "dq", "dk", "dv", "dbeta", "dlam", "dS0"))
        assert not r["nan"] and worst < TOLERANCE[r["dtype"]], r


def test_without_a_gpu_it_refuses_unless_smoke(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, out = gpu_check()
    assert code == 2 and "needs a CUDA GPU" in out and "--smoke" in out


@pytest.mark.slow
def test_smoke_checks_and_times_both_rules_at_a_tiny_shape(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("the smoke run is the CPU interpreter's; the gpu test covers a GPU")
    code, out = gpu_check("--smoke", "--no-sweeps", "--out", str(tmp_path), "--commit", "abc")
    assert code == 0, out
    assert "| check | falcon-1 | (1, 80, 2, 16)" in out and "| time | falcon-2 |" in out
    log = tmp_path / "regression_gpu_check.log"
    assert json.loads(log.read_text().splitlines()[0])["commit"] == "abc"
    assert_within_tolerance(checked_rows(log))


@pytest.mark.gpu
def test_on_a_gpu_the_kernels_hold_at_real_sizes(tmp_path: Path) -> None:
    code, out = gpu_check("--quick", "--no-sweeps", "--no-fla", "--out", str(tmp_path))
    assert code == 0, out
    assert_within_tolerance(checked_rows(tmp_path / "regression_gpu_check.log"))


def test_bad_rules_and_shapes_are_one_line_and_exit_2(tmp_path: Path) -> None:
    for args, said in ((("--rule", "falcon-9"), "unknown rules ['falcon-9']"),
                       (("--check-shape", "1,2"), "expected B,T,H,D")):
        code, out = gpu_check("--smoke", *args, "--out", str(tmp_path))
        assert code == 2 and said in out and len(out.strip().splitlines()) == 1
    assert not (tmp_path / "regression_gpu_check.log").exists()


@pytest.mark.slow
def test_smoke_checks_any_rule_at_the_shapes_asked(tmp_path: Path) -> None:
    """--rules picks the rules (each against its own float64 chunk form) and --check-shapes the shapes; under the
    interpreter the inner-product rules' bf16 rows say they are the GPU's (its tl.dot on bf16 operands is wrong)."""
    if torch.cuda.is_available():
        pytest.skip("the smoke run is the CPU interpreter's")
    code, out = gpu_check("--smoke", "--no-sweeps", "--rules", "falcon-1a", "--rules", "falcon-3", "--out",
                          str(tmp_path))
    assert code == 0, out
    rows = [json.loads(line) for line in (tmp_path / "regression_gpu_check.log").read_text().splitlines()]
    checked = {(r["check"], r["dtype"]): r for r in rows if "check" in r}
    assert set(checked) == {(r, d) for r in ("falcon-1a", "falcon-3") for d in ("torch.bfloat16", "torch.float32")}
    assert checked["falcon-1a", "torch.bfloat16"]["skipped"] == "bf16 dots: GPU only"
    for key, r in checked.items():
        if "skipped" not in r:
            worst = max(r[k] for k in ("o", "S", "dq", "dk", "dv", "dbeta", "dlam", "dS0"))
            assert not r["nan"] and worst < TOLERANCE[r["dtype"]], r
    assert {r["time"] for r in rows if "time" in r} == {"falcon-1a", "falcon-3"}
