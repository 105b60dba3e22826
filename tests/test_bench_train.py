"""`lab bench train`: a real short run per mixer summarised into one table."""

from __future__ import annotations

import csv
import subprocess
import sys

from falcon_lab.bench.train import summarise_run


def test_summary_takes_the_median_speed_of_the_second_half(tmp_path):
    rows = [("5", "3.0", "100"), ("10", "2.5", "900"), ("15", "2.0", "1000"), ("20", "1.5", "1100")]
    with (tmp_path / "metrics.csv").open("w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow(["step", "loss", "tokens_per_s", "val_loss"])
        for step, loss, speed in rows:
            w.writerow([step, loss, speed, ""])
    row = summarise_run("transformer", tmp_path, 0, 12.3, "")
    assert row["tokens_per_s"] == 1050 and row["loss"] == 1.5 and row["steps"] == 20 and row["status"] == "ok"
    failed = summarise_run("falcon-1", tmp_path / "missing", 1, 1.0, "Traceback\nValueError: boom\n")
    assert failed["status"] == "failed (1)" and failed["message"] == "ValueError: boom" and failed["steps"] == 0


def test_bench_train_end_to_end(tmp_path):
    out = tmp_path / "bench"
    proc = subprocess.run([sys.executable, "-m", "falcon_lab", "bench", "train", "--mixers", "falcon-1a.3", "--preset",
                           "tiny", "--max-steps", "4", "--out", str(out), "--work", str(tmp_path / "runs")],
                          capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    (row,) = list(csv.DictReader((out / "train.csv").open()))
    assert row["mixer"] == "falcon-1a.3" and row["status"] == "ok" and int(row["params"]) > 0
    assert float(row["tokens_per_s"]) > 0
    assert "falcon-1a.3" in (out / "train.md").read_text()


def test_unknown_mixer_is_refused_with_the_accepted_names(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "falcon_lab", "bench", "train", "--mixers", "falcon-9", "--out",
                           str(tmp_path)], capture_output=True, text=True)
    assert proc.returncode == 2 and "falcon-9" in proc.stderr and "transformer" in proc.stderr
