"""`lab bench step`: the step anatomy of a tiny run on the CPU, and its refusals."""

from __future__ import annotations

import csv
from pathlib import Path

from typer.testing import CliRunner

from lab.cli import app


def test_step_anatomy_times_each_stage_and_writes_its_table(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "step", "--mixers", "transformer,falcon-1a", "--preset", "tiny",
                                      "--steps", "2", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader((tmp_path / "step.csv").open()))
    assert [r["mixer"] for r in rows] == ["transformer", "falcon-1a"]
    for r in rows:
        stages = [float(r[k]) for k in ("loop_ms", "data_ms", "fwd_ms", "bwd_ms", "opt_ms")]
        assert all(s > 0 for s in stages)
        assert int(r["params"]) > 0 and float(r["tokens_per_s"]) > 0
    assert "| transformer |" in (tmp_path / "step.md").read_text()


def test_an_unknown_mixer_or_no_steps_is_refused_in_one_line(tmp_path: Path) -> None:
    for args, message in ((["--mixers", "nope"], "lab bench step: unknown mixer nope; accepted: "),
                          (["--steps", "0"], "lab bench step: --steps must be >= 1, got 0"),
                          (["--mixers", "transformer,falcon-1a", "--set", "model.n_heads=7"],
                           "lab bench step: model.d_model=")):
        result = CliRunner().invoke(app, ["bench", "step", *args, "--out", str(tmp_path / "out")])
        assert result.exit_code == 2 and result.output.startswith(message), result.output
        assert result.output.count("\n") == 1 and not (tmp_path / "out").exists()  # nothing written
