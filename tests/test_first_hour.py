"""What a newcomer meets in the first hour: one name per preset and a short --help, the mixer a run trains named,
`lab report runs` readable in a pipe, `lab report`'s progress, each panel of progress.png with its own accuracy
axis, and `lab eval addition`'s columns naming the widths the run trained on."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.runs import Registry

ROOT = Path(__file__).resolve().parents[1]
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args), env={"COLUMNS": "100"})
    return result.exit_code, ANSI.sub("", result.output)


def test_the_reproduce_help_names_the_presets_in_a_few_lines() -> None:
    _, text = invoke("reproduce", "addition", "--help")
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if "--preset" in line)
    end = next(i for i, line in enumerate(lines) if "--rows" in line)
    assert end - start <= 12, "\n".join(lines[start:end])
    assert "addition-cpu (tiny" in " ".join(lines[start:end])


def test_the_small_addition_preset_says_which_command_uses_it() -> None:
    presets = ROOT / "falcon_lab" / "presets"
    tiny = (presets / "addition-tiny.yaml").read_text()
    assert "lab train --preset addition-tiny" in tiny and "addition-cpu" in tiny
    assert "`lab reproduce addition --preset tiny` runs every row" not in tiny
    assert "lab reproduce addition --preset tiny" in (presets / "addition-cpu.yaml").read_text()


def test_lab_train_lists_the_registrys_mixers_and_names_the_one_it_trains(tmp_path: Path) -> None:
    from falcon_lab.cli.train import MIXER_NAMES
    from falcon_lab.mixers import MIXERS

    assert set(MIXER_NAMES) == set(MIXERS)
    _, text = invoke("train", "--help")
    flat = " ".join(text.replace("│", " ").split())
    assert "falcon-1a.3" in flat and "gated-deltanet" in flat and "else transformer" in flat
    code, text = invoke("train", "--preset", "tiny", "--max-steps", "2", "--out", str(tmp_path / "run"),
                        "--results", str(tmp_path), "--no-progress")
    assert code == 0 and "(transformer on addition) finished (2 steps)" in text, text


def test_lab_report_runs_in_a_pipe_prints_whole_plain_rows_and_takes_results(tmp_path: Path) -> None:
    reg = Registry(tmp_path / "lab.db")
    reg.upsert("aaa111", task="addition", mixer="falcon-1a.3", status="finished", steps=20, final_loss=1.25,
               device="a long device name with spaces", commit="0123456789abcdef")
    proc = subprocess.run([sys.executable, "-m", "falcon_lab", "report", "runs", "--results", str(tmp_path)],
                          capture_output=True, text=True, env={**os.environ, "COLUMNS": "80"}, timeout=120)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"1 run(s) in {tmp_path / 'lab.db'}"
    assert lines[1].split()[:4] == ["id", "task", "mixer", "preset"]
    assert lines[2].startswith("aaa111  addition  falcon-1a.3  -") and "a long device name with spaces" in lines[2]
    assert not any(c in proc.stdout for c in "┃│━")


def test_lab_report_says_which_section_it_draws(tmp_path: Path) -> None:
    records = tmp_path / "records"
    records.mkdir()
    proc = subprocess.run([sys.executable, "-m", "falcon_lab", "report", "all", "--records", str(records),
                           "--results", str(tmp_path / "out"), "--section", "kernels", "--section", "sweeps",
                           "--progress"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert re.search(r"^\[\d+ s\] section 1 of 2: sweeps$", proc.stderr, re.M)
    assert re.search(r"^\[\d+ s\] section 2 of 2: kernels$", proc.stderr, re.M)
    assert proc.stdout.startswith("report: ")


def test_every_progress_panel_shows_its_accuracy_axis(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import matplotlib.pyplot as plt

    from falcon_lab.plots import addition as plots
    from tests.test_plots import progress

    kept = {}
    monkeypatch.setattr(plots, "save_png", lambda fig, path, *a, **k: kept.setdefault("fig", fig) and path)
    plots.plot_progress(progress({"transformer": 2, "falcon-1.3": 1, "deltanet": 1}), tmp_path / "progress.csv",
                        tmp_path / "progress.png", "lab plot addition")
    fig = kept["fig"]
    fig.canvas.draw()
    twins = [ax for ax in fig.axes if ax.get_ylim() == (-3, 103)]
    assert len(twins) == 3
    for ax in twins:
        shown = [t for t in ax.yaxis.get_ticklabels() if t.get_visible() and t.get_text()]
        assert ax.yaxis.get_tick_params()["labelright"] and shown, "a panel without its accuracy scale"
    plt.close(fig)


def test_lab_eval_names_the_widths_the_run_trained_on(tmp_path: Path) -> None:
    from falcon_lab.config import load_config
    from falcon_lab.train import run_training

    cfg = load_config("addition-tiny", task="addition", overrides=["train.max_steps=2", "train.val_every=2",
                                                                    "eval.n_per_length=1", "eval.free_per_length=0"])
    from falcon_lab.eval.training import evaluation_callbacks

    run_training(cfg, out=tmp_path / "run", results=tmp_path, progress=False, evaluations=evaluation_callbacks)
    code, text = invoke("eval", "addition", "--run", str(tmp_path / "run"), "--per-n", "1", "--free-per-n", "0")
    assert code == 0, text
    header, _, row = text.strip().splitlines()[1:4]
    cells = dict(zip(header.strip("| ").split(" | "), row.strip("| ").split(" | ")))
    assert cells["Trained widths"] == "1–8" and "Val. acc. 1–32" in cells


def test_a_run_raises_none_of_the_warnings_lightning_and_torch_raise_on_every_fit(tmp_path: Path) -> None:
    import warnings

    from falcon_lab.config import load_config
    from falcon_lab.train import run_training

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        run_training(load_config("tiny", overrides=["train.max_steps=2"]), out=tmp_path / "run", results=tmp_path,
                     progress=False)
    known = ("LeafSpec", "does not have many workers", "script_method")
    assert not [str(w.message) for w in caught if any(k in str(w.message) for k in known)]
    assert not [str(w.message) for w in caught if issubclass(w.category, (FutureWarning, DeprecationWarning))]
