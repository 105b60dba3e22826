"""`lab bench throughput`: a row's run timed from process start to exit, and its timings read off metrics.csv."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from typer.testing import CliRunner

from falcon_lab.bench.throughput import COLUMNS, best_scores, timings
from falcon_lab.cli import app


def test_timings_take_evaluation_out_of_the_steps() -> None:
    rows = [{"step": "10", "elapsed_s": "31.0", "eval_s": "0"},       # 30 s before step 1, then 0.1 s a step
            {"step": "20", "elapsed_s": "32.0", "eval_s": "0"},
            {"step": "30", "elapsed_s": "35.0", "eval_s": "2.0"},     # 2 s of evaluation in between
            {"step": "40", "elapsed_s": "36.0", "eval_s": "2.0"}]
    found = timings(rows)
    assert found["step_ms"] == pytest.approx(100.0)
    assert found["compile_s"] == pytest.approx(30.0)
    assert found["eval_s"] == 2.0
    assert timings([]) == {"step_ms": None, "compile_s": None, "eval_s": None}


def test_best_scores_take_the_earliest_best_step() -> None:
    evals = [{"val_acc": "50", "ood_mean": "1"}, {"val_acc": "99", "ood_mean": "20"}, {"val_acc": "99", "ood_mean": "30"}]
    assert best_scores(evals) == {"val_acc": 99.0, "ood_mean": 20.0}


def test_a_row_is_timed_from_process_start_to_exit(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "throughput", "--mixers", "transformer", "--preset", "addition-tiny",
                                      "--set", "train.max_steps=12", "--set", "train.log_every=2",
                                      "--set", "train.val_every=6", "--out", str(tmp_path)])
    assert result.exit_code == 0, result.output
    (line,) = list(csv.DictReader((tmp_path / "throughput.csv").open()))
    assert tuple(line) == COLUMNS
    assert line["row"] == "transformer" and line["status"] == "ok" and line["steps"] == "12" and line["gpu"] == "cpu"
    assert line["target_s"] == "60.0" and line["on_target"] == str(float(line["wall_s"]) <= 60.0)
    wall, step_ms, compile_s = float(line["wall_s"]), float(line["step_ms"]), float(line["compile_s"])
    assert step_ms > 0 and compile_s >= 0 and float(line["eval_s"]) > 0 and float(line["other_s"]) > 0
    assert wall > 12 * step_ms / 1e3 + float(line["eval_s"])
    start, setup, finish = (float(line[k]) for k in ("start_s", "setup_s", "finish_s"))  # the run's own timings
    assert start > 0 and setup > 0 and finish >= 0 and start + setup + finish < float(line["other_s"])
    assert 0 <= float(line["exit_s"]) < wall - start - setup - finish  # after the last record: the teardown
    assert line["mfu"] == "" and float(line["tflop"]) > 0  # no bf16 peak claimed for a CPU
    assert line["val_acc"] != ""
    assert "| transformer | 0 | ok |" in (tmp_path / "throughput.md").read_text()


def test_every_row_has_a_minute_but_falcon_2_and_3_two() -> None:
    from falcon_lab.bench.throughput import target_s

    assert [target_s(r) for r in ("transformer", "falcon-1a.3", "falcon-3a.3", "falcon-2a", "falcon-2", "falcon-3")] == [
        60.0, 60.0, 60.0, 60.0, 120.0, 120.0]


def test_an_unknown_row_is_refused_in_one_line(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["bench", "throughput", "--mixers", "nope", "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and result.output.startswith("lab bench throughput: unknown mixer nope")
    assert result.output.count("\n") == 1 and not (tmp_path / "o").exists()


def test_samples_reach_the_runs_through_their_environment(monkeypatch, tmp_path: Path) -> None:
    """`--samples by-id` / `packed` set `LAB_SAMPLE_IDS` for every run's process; without it the environment is
    passed as it is."""
    from falcon_lab.bench import throughput

    envs = []

    def timed_run(cmd, timeout_s, env=None):
        envs.append(env)
        return 1, "", "no run", 0.1

    monkeypatch.setattr(throughput, "timed_run", timed_run)
    for choice in ("by-id", "packed", None):
        CliRunner().invoke(app, ["bench", "throughput", "--mixers", "falcon-1a.3", "--preset", "addition-tiny",
                                 "--out", str(tmp_path / str(choice)), *(["--samples", choice] if choice else [])])
    assert envs == [{"LAB_SAMPLE_IDS": "1"}, {"LAB_SAMPLE_IDS": "0"}, None]


def test_each_run_is_set_beside_the_rows_recorded_seeds(tmp_path: Path) -> None:
    """`recorded` reads a campaign's table.csv; `against` says whether a run's mean over 33-48 lies within two
    standard deviations of the recorded mean, or within the seeds' range where that is wider."""
    from falcon_lab.bench.throughput import against, recorded

    table = tmp_path / "table.csv"
    table.write_text("row,model,ood_mean_mean,ood_mean_std,ood_mean_seeds\n"
                     "transformer,Transformer,50.4,7.9,59.5 45.1 46.6\nretnet,RetNet,21.0,0.5,21.4 17.3 24.4\n")
    rec = recorded(table)
    assert rec["transformer"] == {"mean": 50.4, "sd": 7.9, "seeds": [59.5, 45.1, 46.6]}
    assert against(66.1, rec["transformer"])["within_spread"] is True  # 50.4 + 2 × 7.9 = 66.2
    assert against(66.3, rec["transformer"])["within_spread"] is False
    assert against(24.4, rec["retnet"])["within_spread"] is True  # the seeds' range is wider than 2 sd here
    assert against(24.5, rec["retnet"]) == {"record_ood_mean": 21.0, "record_ood_sd": 0.5,
                                            "record_ood_seeds": "21.4 17.3 24.4", "within_spread": False}
    assert against(None, rec["retnet"])["within_spread"] is None and against(30.0, None) == {}


def test_a_table_that_cannot_be_read_is_refused_in_one_line_before_any_run(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n")
    for path, message in ((tmp_path / "none.csv", "cannot read it"), (bad, "not a campaign's table.csv")):
        result = CliRunner().invoke(app, ["bench", "throughput", "--mixers", "transformer", "--against", str(path),
                                          "--out", str(tmp_path / "o")])
        assert result.exit_code == 2 and result.output.startswith(f"lab bench throughput: --against {path}: ")
        assert message in result.output and result.output.count("\n") == 1 and not (tmp_path / "o").exists()
