"""`lab sweep run` refuses bad spaces and options in one line, before anything starts."""

from pathlib import Path

import pytest
from typer.testing import CliRunner

from falcon_lab.cli import app


def test_cli_reports_a_bad_space_in_one_line_and_exits_2(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("params:\n  lr: {key: optim.lr, type: float, low: 0.1, high: 0.01}\n")
    result = CliRunner().invoke(app, ["sweep", "run", str(path), "--results", str(tmp_path / "r"),
                                      "--mixer", "falcon-1"])
    assert result.exit_code == 2
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0] == f"lab sweep: {path}: parameter lr: low must be < high, got low=0.1 high=0.01"
    assert not (tmp_path / "r").exists()  # nothing started, nothing written


@pytest.mark.parametrize("args,problem", [
    (["rules", "--mixer", "falcon-1"], "--mixer falcon-1 conflicts with the space"),
    (["regime"], "fixes no mixer; give --mixer NAME"),
    (["rules", "--set", "optim.lr=1e-3"], "--set optim.lr conflicts with the space"),
    (["rules", "--set", "eval.enabled=false"], "--set eval.enabled is not accepted in a sweep"),
    (["rules", "--objective", "loss"], "--objective 'loss' is not accepted; accepted: val_acc, val_token_acc, multi, ood_mean"),
    (["rules", "--sampler", "annealing"], "--sampler 'annealing' is not accepted; accepted: tpe, random"),
    (["rules", "--prune-after", "-1"], "--prune-after must be >= 0 steps, got -1"),
    (["nosuch"], "unknown space 'nosuch'; accepted: "),
])
def test_cli_options_that_do_not_fit_the_space_are_refused(tmp_path: Path, args: list[str], problem: str) -> None:
    result = CliRunner().invoke(app, ["sweep", "run", *args, "--results", str(tmp_path / "r")])
    assert result.exit_code == 2, result.output
    assert problem in result.output and len(result.output.strip().splitlines()) == 1, result.output

