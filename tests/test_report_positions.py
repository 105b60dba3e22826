"""`lab report positions`: the answer digits right from either end, per width, from positions.csv."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.plots.positions import digit_ends

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def positions(low: int, high: int, widths: range = range(1, 13), which: str = "best") -> pd.DataFrame:
    """A run that gets `low` digits from the least significant end and `high` from the other right."""
    rows = []
    for n in widths:
        for j in range(n + 1):
            right = j < low or j > n - high
            rows.append({"run": "r", "which": which, "step": 700, "samples": 10, "width": n, "position": j,
                         "token": "digit", "accuracy": 100.0 if right else 10.0})
        rows.append({"run": "r", "which": which, "step": 700, "samples": 10, "width": n, "position": n + 1,
                     "token": "eos", "accuracy": 0.0})  # the end token counts for neither end
    return pd.DataFrame(rows)


def test_low_and_high_ends_are_counted_up_to_the_first_wrong_digit() -> None:
    ends = digit_ends(positions(3, 2)).set_index("width")
    assert (ends.loc[8, "digits"], ends.loc[8, "low"], ends.loc[8, "high"]) == (9, 3, 2)
    # widths up to low + high - 1 have every digit right: both counts are the whole answer
    assert (ends.loc[4, "low"], ends.loc[4, "high"]) == (5, 5)
    assert (ends.loc[5, "low"], ends.loc[5, "high"]) == (3, 2)
    frame = positions(3, 2)
    frame.loc[(frame["width"] == 8) & (frame["position"] == 1), "accuracy"] = 89.9  # just under the threshold
    assert digit_ends(frame).set_index("width").loc[8, "low"] == 1
    assert digit_ends(frame, threshold=80).set_index("width").loc[8, "low"] == 3


def test_the_command_prints_each_file_at_the_widths_asked_and_writes_every_width(tmp_path: Path) -> None:
    a, b = tmp_path / "a.csv", tmp_path / "b.csv"
    pd.concat([positions(3, 2), positions(1, 1, which="last")]).to_csv(a, index=False)
    positions(2, 6).to_csv(b, index=False)
    out = tmp_path / "ends.csv"
    result = CliRunner().invoke(app, ["report", "positions", str(a), str(b), "--widths", "4,8,20",
                                      "--out", str(out)])
    assert result.exit_code == 0, result.output
    lines = ANSI.sub("", result.output).splitlines()
    assert lines[0] == "| file | step | width 4 | width 8 | width 20 |"
    assert lines[2] == f"| {a.as_posix()} | 700 | all 5 | 3 + 2 | — |"
    assert lines[3] == f"| {b.as_posix()} | 700 | all 5 | 2 + 6 | — |"
    assert len(pd.read_csv(out)) == 24
    result = CliRunner().invoke(app, ["report", "positions", str(a), "--widths", "8", "--which", "last"])
    assert ANSI.sub("", result.output).splitlines()[2].endswith("| 1 + 1 |")


@pytest.mark.parametrize(("args", "message"), [
    (["--widths", "8,x"], "lab report positions: --widths must be comma-separated integers, got '8,x'"),
    (["--which", "worst"], "lab report positions: --which must be best or last, got 'worst'"),
])
def test_mistakes_are_one_line_with_exit_2(args: list[str], message: str, tmp_path: Path) -> None:
    csv = tmp_path / "p.csv"
    positions(1, 1).to_csv(csv, index=False)
    result = CliRunner().invoke(app, ["report", "positions", str(csv), *args])
    assert result.exit_code == 2 and ANSI.sub("", result.output).strip() == message


def test_a_missing_or_malformed_file_is_named(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["report", "positions", str(tmp_path / "nope.csv")])
    assert result.exit_code == 2 and "nope.csv" in result.output and result.output.count("\n") == 1
    bad = tmp_path / "bad.csv"
    bad.write_text("width,position\n1,0\n")
    result = CliRunner().invoke(app, ["report", "positions", str(bad)])
    assert result.exit_code == 2 and "bad.csv" in result.output


def test_the_grid_of_heat_maps_draws_one_panel_per_run_and_reads_each_runs_trained_widths(tmp_path: Path) -> None:
    import numpy as np

    from falcon_lab.plots.positions import digit_grid, plot_positions_grid

    csvs = []
    for name, (low, high) in {"a": (3, 2), "b": (2, 6)}.items():
        run = tmp_path / name
        run.mkdir()
        pd.concat([positions(low, high), positions(0, 0, which="last")]).to_csv(run / "positions.csv", index=False)
        (run / "config.yaml").write_text("data:\n  widths: [1, 8]\n", encoding="utf-8")
        csvs.append(run / "positions.csv")
    grid = digit_grid(positions(3, 2))
    assert grid.shape == (12, 13) and grid[11, 0] == 100.0 and grid[11, 5] == 10.0 and np.isnan(grid[0, 5])
    out = plot_positions_grid(csvs, tmp_path / "grid.png", ["A, seed 0", "B, seed 1"], "two runs")
    assert out == [tmp_path / "grid.png"] and out[0].stat().st_size > 0
    with pytest.raises(ValueError, match="2 positions.csv files and 1 labels"):
        plot_positions_grid(csvs, tmp_path / "bad.png", ["A"], "two runs")
    (tmp_path / "b" / "config.yaml").unlink()
    with pytest.raises(ValueError, match="no config.yaml of its run"):
        plot_positions_grid(csvs, tmp_path / "bad.png", ["A", "B"], "two runs")
    assert not (tmp_path / "bad.png").exists()
