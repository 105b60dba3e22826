"""`lab bench conv`: the short convolution's kernels timed in its backward's launch variants (here under Triton's
interpreter, one untimed pass), a row a shape, variant and mode; one line and exit 2 for what cannot run."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest
import torch
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.kernels.conv import triton_short_conv

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def bench(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["bench", "conv", *args])
    return result.exit_code, ANSI.sub("", result.output)


def settings() -> tuple:
    t = triton_short_conv
    return t.BT_FWD, t.BWD_FORM, t.SPAN_TILES, t.SERIAL_SPAN, t.SERIAL_BC, t.SERIAL_ROWS, t.SERIAL_VEC


def test_smoke_times_each_form_and_launch_and_restores_the_defaults(tmp_path: Path) -> None:
    if torch.cuda.is_available():
        pytest.skip("the smoke run is the CPU interpreter's")
    kept = settings()
    code, out = bench("--smoke", "--shape", "2,30,40", "--span-tiles", "3", "--serial-span", "16",
                      "--serial-channels", "32", "--serial-channels", "64", "--serial-rows", "1", "--serial-rows", "2",
                      "--serial-vec", "1", "--serial-vec", "2", "--fwd-tokens", "16", "--fwd-tokens", "64",
                      "--out", str(tmp_path))
    assert code == 0, out
    rows = list(csv.DictReader((tmp_path / "conv.csv").open(encoding="utf-8")))
    serial = [("serial", "16", bc, r, v, "bwd") for bc in ("32", "64") for r in ("1", "2") for v in ("1", "2")]
    assert [(r["form"], r["span"], r["channels"], r["rows"], r["vec"], r["mode"]) for r in rows] == [
        ("tiles", "16", "64", "1", "1", "fwd"), ("tiles", "64", "64", "1", "1", "fwd"),
        ("tiles", "3", "64", "1", "1", "bwd"), *serial]
    assert all(r["status"] == "ok" and r["shape"] == "2x30x40" and float(r["ms"]) > 0 for r in rows)
    # the floor: x read and y written forward, x and dy read and dx written backward, all bf16
    assert float(rows[2]["floor_ms"]) == pytest.approx(1.5 * float(rows[0]["floor_ms"]), rel=1e-3)
    assert "interpreter" in (tmp_path / "conv.md").read_text(encoding="utf-8")
    assert settings() == kept


@pytest.mark.parametrize(("args", "said"), [(("--shape", "2,30"), "expected B,L,C"),
                                            (("--span-tiles", "0"), "--span-tiles must be >= 1"),
                                            (("--serial-span", "0"), "--serial-span must be >= 1"),
                                            (("--serial-channels", "48"), "powers of two >= 32"),
                                            (("--serial-rows", "3"), "powers of two >= 1"),
                                            (("--serial-vec", "0"), "--serial-vec must be powers of two"),
                                            (("--fwd-tokens", "24"), "--fwd-tokens must be powers of two >= 16")])
def test_bad_options_are_one_line_and_exit_2(args: tuple[str, ...], said: str, tmp_path: Path) -> None:
    code, out = bench("--smoke", *args, "--out", str(tmp_path))
    assert code == 2 and said in out and len(out.strip().splitlines()) == 1, out
    assert not (tmp_path / "conv.csv").exists()


def test_without_a_gpu_it_refuses_unless_smoke(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    code, out = bench("--out", str(tmp_path))
    assert code == 2 and "needs a CUDA GPU" in out and "--smoke" in out


def test_the_form_in_the_environment_sets_the_backward_and_a_wrong_one_is_one_line_and_exit_2(tmp_path: Path) -> None:
    """LAB_CONV_FORM picks the backward's form for a whole process (a step timed in either form on one machine)."""
    import os
    import subprocess
    import sys

    def lab(form: str, *args: str) -> subprocess.CompletedProcess:
        env = {**os.environ, "LAB_CONV_FORM": form, "TRITON_INTERPRET": "1"}
        return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300)

    for form in ("serial", "tiles"):
        done = lab(form, "-c", "from falcon_lab.kernels.conv import triton_short_conv as t; print(t.BWD_FORM)")
        assert done.returncode == 0 and done.stdout.split() == [form], done.stderr
    done = lab("fast", "-m", "falcon_lab", "bench", "conv", "--smoke", "--out", str(tmp_path))
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == ("lab bench: LAB_CONV_FORM: the short convolution's backward form must be one of "
                                   "tiles, serial, got 'fast'")
    assert not (tmp_path / "conv.csv").exists()
