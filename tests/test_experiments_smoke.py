"""Every declared experiment at its smoke size: `lab experiment run NAME --smoke` trains a few steps of a tiny
model on the CPU and writes its tables, then `lab experiment report NAME --smoke` remakes them from the runs and
`lab experiment status NAME --smoke` finds every smoke run finished. So no experiment file can rot unseen."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.experiments import experiments
from falcon_lab.experiments.declare import Commands
from falcon_lab.experiments.runner import declared, tables

ANSI = re.compile(r"\x1b\[[0-9;]*m")
NAMES = sorted(experiments())


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, ANSI.sub("", result.output)


@pytest.mark.parametrize("name", NAMES)
def test_each_experiment_runs_at_its_smoke_size_and_reports(name: str, tmp_path: Path) -> None:
    code, text = invoke("experiment", "run", name, "--smoke", "--results", str(tmp_path))
    assert code == 0, text
    experiment = experiments()[name]
    made = tables(experiment, tmp_path, smoke=True)
    assert made and all(t.is_file() for t in made), text
    first = {t: t.stat().st_mtime_ns for t in made}
    code, text = invoke("experiment", "report", name, "--smoke", "--results", str(tmp_path))
    assert code == 0, text
    assert all(t.stat().st_mtime_ns >= first[t] and f"table: {t}" in text for t in made), text
    # a table the lab's campaigns write names the command that remakes it; a Commands part's files are its
    # commands' own (a benchmark's table names the benchmark), but for the check of commands that need a GPU
    own = [t for t, part in zip(made, declared(experiment, smoke=True).parts)
           if not isinstance(part, Commands) or part.checking]
    assert all(f"lab experiment run {name} --smoke" in t.read_text(encoding="utf-8") for t in own)
    code, text = invoke("experiment", "status", name, "--smoke", "--results", str(tmp_path))
    assert code == 0 and re.search(rf"{name}: (\d+) planned, \1 finished, 0 running, 0 missing", text), text
