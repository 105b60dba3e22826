"""Compacted run records (`lab runs compact`): positions.csv kept as deterministic gzip, read back by every
reader as the plain file, only for finished runs, and the checkout's records all in that form."""

from __future__ import annotations

import gzip
import json
import re
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from lab.cli import app
from lab.compact import compact_run, compact_runs, readable
from lab.paths import REPO_ROOT
from lab.plots.positions import read_positions

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, ANSI.sub("", result.output)


def make_run(root: Path, run_id: str, status: str) -> Path:
    run = root / "runs" / run_id
    run.mkdir(parents=True)
    (run / "run.json").write_text(json.dumps({"status": status}))
    (run / "config.yaml").write_text("task: addition\ndata:\n  widths: [1, 4]\n")
    pd.DataFrame([{"run": run_id, "which": which, "step": 100, "samples": 8, "width": n, "position": p,
                   "token": "digit" if p <= n else "eos", "accuracy": 100.0 - 10 * p}
                  for which in ("best", "last") for n in range(1, 7) for p in range(n + 2)]
                 ).to_csv(run / "positions.csv", index=False)
    (run / "metrics.csv").write_text("step,loss\n1,2.0\n")
    return run


def test_finished_runs_are_gzipped_deterministically_and_read_back_unchanged(tmp_path: Path) -> None:
    done, going = make_run(tmp_path, "aaaa", "finished"), make_run(tmp_path, "bbbb", "running")
    plain = (done / "positions.csv").read_bytes()
    before = read_positions(done / "positions.csv")
    assert compact_runs(tmp_path, dry_run=True) == [done / "positions.csv.gz"]
    assert (done / "positions.csv").is_file() and not (done / "positions.csv.gz").exists()

    assert compact_runs(tmp_path) == [done / "positions.csv.gz"]
    assert not (done / "positions.csv").exists() and gzip.decompress((done / "positions.csv.gz").read_bytes()) == plain
    assert (going / "positions.csv").is_file() and not (going / "positions.csv.gz").exists()  # still training
    assert (done / "metrics.csv").is_file()  # only the listed files are compacted
    # readers name the plain file and get the same table
    assert readable(done / "positions.csv") == done / "positions.csv.gz"
    pd.testing.assert_frame_equal(read_positions(done / "positions.csv"), before)
    # the same bytes every time: compacting a copy again changes nothing git would see
    packed = (done / "positions.csv.gz").read_bytes()
    (done / "positions.csv").write_bytes(plain)
    (done / "positions.csv.gz").unlink()
    compact_run(done)
    assert (done / "positions.csv.gz").read_bytes() == packed
    assert compact_runs(tmp_path) == []  # nothing left to do


def test_a_run_not_finished_is_refused_by_name_and_a_corrupt_gzip_named(tmp_path: Path) -> None:
    going = make_run(tmp_path, "bbbb", "stopped")
    code, out = invoke("runs", "compact", str(going))
    assert code == 2 and f"{going}: the run is stopped, not finished" in out
    code, out = invoke("runs", "compact", str(tmp_path / "missing"))
    assert code == 2 and "no such folder" in out
    (going / "positions.csv").unlink()
    (going / "positions.csv.gz").write_bytes(b"\x1f\x8b not a gzip stream")
    with pytest.raises(ValueError, match=r"positions\.csv\.gz: not a readable CSV file"):
        read_positions(going / "positions.csv")
    with pytest.raises(ValueError, match=r"positions\.csv: no such file"):  # neither form: the name asked for
        read_positions(tmp_path / "positions.csv")


def test_lab_runs_compact_says_what_it_gzipped_and_lab_report_positions_reads_it(tmp_path: Path) -> None:
    done = make_run(tmp_path, "aaaa", "finished")
    code, out = invoke("runs", "compact", str(tmp_path), "--dry-run")
    assert code == 0 and "would gzip" in out and "would compact 1 file under" in out
    code, out = invoke("runs", "compact", str(tmp_path))
    assert code == 0 and f"gzipped {done / 'positions.csv'}" in out and "compacted 1 file under" in out
    code, out = invoke("report", "positions", str(done / "positions.csv"))
    assert code == 0, out


def test_the_checkouts_records_keep_every_positions_csv_compacted() -> None:
    plain = sorted(str(p.relative_to(REPO_ROOT)) for p in (REPO_ROOT / "records").rglob("positions.csv")
                   if (p.parent / "run.json").is_file())
    assert not plain, f"run records with a plain positions.csv (run `lab runs compact records`): {plain[:5]}"
