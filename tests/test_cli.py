"""The `lab` command line: its groups, its version, and how unbuilt commands refuse."""

import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from typer.testing import CliRunner

import falcon_lab
from falcon_lab.cli import GROUPS, app

ANSI = re.compile(r"\x1b\[[0-9;]*m")
ROOT = Path(__file__).resolve().parents[1]

# The commands each group offers; groups may gain commands but must keep these.
EXPECTED = {
    "data": ["addition", "fineweb"],
    "eval": ["addition", "ppl"],
    "sweep": ["run", "report"],
    "reproduce": ["addition", "fineweb"],
    "ablate": ["alignment"],
    "experiment": ["list", "run", "status", "report"],
    "plot": ["addition", "ablation"],
    "bench": ["kernels", "train"],
    "report": ["runs", "all", "positions"],
    "runs": ["merge"],
}


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, ANSI.sub("", result.output)


def run(command: list[str]) -> subprocess.CompletedProcess:
    """Run a command in a fresh process from the repository root, as a user's shell would."""
    proc = subprocess.run(command, capture_output=True, text=True, timeout=120, cwd=ROOT)
    proc.stdout, proc.stderr = ANSI.sub("", proc.stdout), ANSI.sub("", proc.stderr)
    return proc


def console_script() -> str:
    """Path of the installed `lab` console script; skips the test when falcon-lab is not pip-installed."""
    found = shutil.which("lab", path=sysconfig.get_path("scripts"))
    if found is None:
        pytest.skip("the lab console script is not installed (pip install -e .)")
    return found


def test_help_lists_all_eleven_groups() -> None:
    code, out = invoke("--help")
    assert code == 0
    assert GROUPS == ("data", "train", "eval", "sweep", "reproduce", "ablate", "experiment", "plot", "bench", "report",
                      "runs")
    for group in GROUPS:
        assert re.search(rf"^\W*{group}\s", out, re.MULTILINE), f"{group} missing from lab --help"


@pytest.mark.parametrize("group", sorted(EXPECTED))
def test_group_help_lists_its_commands(group: str) -> None:
    code, out = invoke(group, "--help")
    assert code == 0
    for command in EXPECTED[group]:
        assert re.search(rf"^\W*{command}\s", out, re.MULTILINE), f"lab {group} {command} missing"


@pytest.mark.parametrize("args", [("train",)] + [(g, c) for g in sorted(EXPECTED) for c in EXPECTED[g]])
def test_every_command_has_working_help(args: tuple[str, ...]) -> None:
    code, out = invoke(*args, "--help")
    assert code == 0, out
    assert "Usage:" in out


def test_train_takes_its_options() -> None:
    code, out = invoke("train", "--help")
    assert code == 0
    for option in ("--task", "--mixer", "--preset", "--config", "--max-steps", "--out", "--devices", "--seed"):
        assert option in out


def test_version() -> None:
    code, out = invoke("--version")
    assert code == 0
    assert out.strip() == f"falcon-lab {falcon_lab.__version__}"


@pytest.mark.parametrize("how", ["python -m falcon_lab", "console script"])
def test_help_in_a_fresh_process(how: str) -> None:
    lab_command = [sys.executable, "-m", "falcon_lab"] if how == "python -m falcon_lab" else [console_script()]
    proc = run([*lab_command, "--help"])
    assert proc.returncode == 0, proc.stderr
    for group in GROUPS:
        assert group in proc.stdout


def test_bad_input_refuses_in_a_fresh_process(tmp_path) -> None:
    # one line on stderr naming the problem, nothing on stdout, exit code 2
    missing = tmp_path / "no-shards-here"
    proc = run([sys.executable, "-m", "falcon_lab", "reproduce", "fineweb", "--data", str(missing)])
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert str(missing) in proc.stderr and len(proc.stderr.strip().splitlines()) == 1


def test_cli_import_stays_light() -> None:
    # `lab --help` must not wait for torch or lightning: groups import them inside commands.
    heavy = "import sys, falcon_lab.cli; print(sorted({'torch', 'lightning', 'optuna'} & set(sys.modules)))"
    proc = run([sys.executable, "-c", heavy])
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == "[]"


def test_campaign_options_are_declared_once_and_reach_the_command_whole() -> None:
    """`with_campaign_options` shows a command's `campaign` parameter as the seven shared options, in its place,
    and hands the command one CampaignOptions built from them."""
    import inspect

    from falcon_lab.cli._common import CampaignOptions, with_campaign_options

    seen = []

    @with_campaign_options
    def command(first: int = 1, campaign: CampaignOptions = CampaignOptions(), last: str = "x") -> None:
        seen.append((first, campaign, last))

    names = list(inspect.signature(command).parameters)
    assert names == ["first", "gpus", "per_gpu", "gpus_per_run", "table_only", "max_steps", "results", "start_within",
                     "last"]
    command(first=2, gpus=None, per_gpu=3, gpus_per_run=1, table_only=True, max_steps=10, results=None,
            start_within=None, last="y")
    assert seen == [(2, CampaignOptions(per_gpu=3, table_only=True, max_steps=10), "y")]
    assert seen[0][1].slots() == 3
