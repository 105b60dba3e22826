"""Compacted run records (`lab runs compact`): positions.csv, metrics.csv, evals.csv and Lightning's CSV log kept
as deterministic gzip, read back by every reader as the plain file, only for finished runs, and the checkout's
records all in that form."""

from __future__ import annotations

import gzip
import json
import re
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.compact import COMPACTED, compact_run, compact_runs, open_text, readable
from falcon_lab.eval.callback import read_evals
from falcon_lab.train.callbacks import read_metrics
from falcon_lab.paths import REPO_ROOT
from falcon_lab.plots.positions import read_positions

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
    (run / "metrics.csv").write_text("step,loss,val_acc\n1,2.0,\n2,1.5,40.0\n")
    (run / "evals.csv").write_text("step,val_acc,ood_mean,tf@1,tok@1\n2,40.0,0.0,50.0,75.0\n")
    (run / "logs" / "csv" / "version_0").mkdir(parents=True)
    (run / "logs" / "csv" / "version_0" / "metrics.csv").write_text("loss,step\n2.0,1\n")
    (run / "logs" / "csv" / "version_0" / "hparams.yaml").write_text("config: {}\n")
    return run


def gzipped(run: Path) -> list[Path]:
    return [run / name for name in ("evals.csv.gz", "logs/csv/version_0/metrics.csv.gz", "metrics.csv.gz",
                                    "positions.csv.gz")]


def test_finished_runs_are_gzipped_deterministically_and_read_back_unchanged(tmp_path: Path) -> None:
    done, going = make_run(tmp_path, "aaaa", "finished"), make_run(tmp_path, "bbbb", "running")
    plain = (done / "positions.csv").read_bytes()
    before = read_positions(done / "positions.csv")
    metrics, evals = read_metrics(done / "metrics.csv"), read_evals(done / "evals.csv")
    assert compact_runs(tmp_path, dry_run=True) == gzipped(done)
    assert (done / "positions.csv").is_file() and not (done / "positions.csv.gz").exists()

    assert compact_runs(tmp_path) == gzipped(done)
    assert not (done / "positions.csv").exists() and gzip.decompress((done / "positions.csv.gz").read_bytes()) == plain
    assert (going / "positions.csv").is_file() and not (going / "positions.csv.gz").exists()  # still training
    assert (done / "config.yaml").is_file() and (done / "logs/csv/version_0/hparams.yaml").is_file()  # only those
    # every reader takes the gzipped form under the plain name
    assert read_metrics(done / "metrics.csv") == metrics and metrics[-1] == {"step": 2, "loss": 1.5, "val_acc": 40.0}
    assert read_evals(done / "evals.csv") == evals and evals[0]["teacher_forced"] == {1: 50.0}
    with open_text(done / "metrics.csv") as f:
        assert f.read() == "step,loss,val_acc\n1,2.0,\n2,1.5,40.0\n"
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
    assert code == 0 and "would gzip" in out and "would compact 4 files under" in out
    code, out = invoke("runs", "compact", str(tmp_path))
    assert code == 0 and f"gzipped {done / 'positions.csv'}" in out and "compacted 4 files under" in out
    code, out = invoke("report", "positions", str(done / "positions.csv"))
    assert code == 0, out


def test_a_compacted_run_trained_further_writes_its_files_plain_and_readers_take_them(tmp_path: Path) -> None:
    done = make_run(tmp_path, "aaaa", "finished")
    compact_run(done)
    rows = read_metrics(done / "metrics.csv")  # MetricsLogger on resume: the rows so far, from the .gz
    (done / "metrics.csv").write_text("step,loss,val_acc\n1,2.0,\n2,1.5,40.0\n3,1.0,\n")  # rewritten whole
    assert readable(done / "metrics.csv") == done / "metrics.csv"
    assert read_metrics(done / "metrics.csv") == [*rows, {"step": 3, "loss": 1.0}]
    compact_run(done)  # compacted again: the .gz now holds every row
    assert [r["step"] for r in read_metrics(done / "metrics.csv")] == [1, 2, 3]


def test_the_checkouts_records_keep_every_compacted_file_compacted() -> None:
    runs = [p.parent for p in (REPO_ROOT / "records").rglob("run.json")]
    plain = sorted(str(p.relative_to(REPO_ROOT)) for run in runs
                   if '"finished"' in (run / "run.json").read_text(encoding="utf-8")
                   for pattern in COMPACTED for p in run.glob(pattern))
    assert not plain, f"finished run records with plain {COMPACTED} files (run `lab runs compact records`): {plain[:5]}"


def test_the_checkout_leaves_room_under_the_device_tools_limit() -> None:
    """The device tool carries the working tree to the GPU and refuses one over 64 MiB (as a tar: every file's bytes
    and about a KiB of header and padding); a call refused for size costs a session its GPU time, and the wheels a
    call carries (`.whl/`, about 1.2 MiB) count too. So the tracked files stay under 60 MiB, counted that way."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO_ROOT, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout")
    files = [REPO_ROOT / name for name in listed.stdout.decode().split("\0") if name]
    size = sum(p.stat().st_size + 1024 for p in files if p.is_file()) / 2**20
    assert size < 60, (f"the tracked files come to {size:.1f} MiB as the device tool counts them (limit 64 with the "
                       f"wheels): compact the records (`lab runs compact records`) or keep fewer files")
