"""`lab report runs` lists what the registry holds, filtered, and exports it."""

from __future__ import annotations

import csv
import os
import subprocess
import sys

from falcon_lab.runs import Registry


def _lab(*args):
    return subprocess.run([sys.executable, "-m", "falcon_lab", "report", "runs", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250"})


def test_lists_and_filters_runs(tmp_path):
    reg = Registry(tmp_path / "lab.db")
    reg.upsert("aaa111", task="addition", mixer="falcon-1a.3", status="finished", steps=20, final_loss=1.25,
               commit="0123456789abcdef", created_at="2026-01-01T00:00:00")
    reg.upsert("bbb222", task="addition", mixer="transformer", status="failed", steps=6,
               created_at="2026-01-02T00:00:00")
    proc = _lab("--root", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    assert "aaa111" in proc.stdout and "bbb222" in proc.stdout and "2 run(s)" in proc.stdout
    proc = _lab("--root", str(tmp_path), "--mixer", "transformer", "--csv", str(tmp_path / "out.csv"))
    assert "bbb222" in proc.stdout and "aaa111" not in proc.stdout
    (row,) = list(csv.DictReader((tmp_path / "out.csv").open()))
    assert row["id"] == "bbb222" and row["status"] == "failed"


def test_missing_registry_is_reported(tmp_path):
    proc = _lab("--root", str(tmp_path))
    assert proc.returncode == 1 and "no registry" in proc.stderr
