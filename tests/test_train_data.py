"""`lab data addition`: the splits written through the tasks layer, and its one-line refusals."""

import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.tasks.addition import read_jsonl, write_jsonl

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, ["data", "addition", *args])
    return result.exit_code, ANSI.sub("", result.output)


def test_writes_the_split_exactly_as_the_tasks_layer_does(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "val.jsonl"
    code, text = invoke("--split", "val", "--digits", "3-5", "--n-per-length", "4", "--seed", "7", "--out", str(out))
    assert code == 0, text
    assert f"wrote 12 val records (seed 7) to {out}" in text
    records = read_jsonl(out)
    assert [r["n"] for r in records] == [3] * 4 + [4] * 4 + [5] * 4
    write_jsonl(tmp_path / "reference.jsonl", "val", (3, 5), 4, 7)
    assert out.read_bytes() == (tmp_path / "reference.jsonl").read_bytes()


def test_default_widths_follow_the_split(tmp_path: Path) -> None:
    out = tmp_path / "ood.jsonl"
    code, text = invoke("--split", "ood", "--n-per-length", "1", "--out", str(out))
    assert code == 0, text
    assert [r["n"] for r in read_jsonl(out)] == list(range(33, 49))
    code, _ = invoke("--split", "train", "--digits", "6", "--n-per-length", "2", "--out", str(tmp_path / "t.jsonl"))
    assert code == 0 and [r["n"] for r in read_jsonl(tmp_path / "t.jsonl")] == [6, 6]


@pytest.mark.parametrize(("args", "expected"), [
    (("--split", "test"), "--split 'test' is not accepted; accepted: train, val, ood"),
    (("--digits", "3-1"), "--digits '3-1' must satisfy 1 <= LO <= HI"),
    (("--digits", "one"), "accepted: LO-HI (e.g. 1-32) or N"),
    (("--n-per-length", "0"), "--n-per-length must be >= 1"),
])
def test_mistakes_exit_2_in_one_line_and_write_nothing(args: tuple[str, ...], expected: str, tmp_path: Path) -> None:
    out = tmp_path / "x.jsonl"
    code, text = invoke(*args, "--out", str(out))
    assert code == 2
    assert text.count("\n") == 1 and expected in text
    assert not out.exists() and not list(tmp_path.iterdir())
