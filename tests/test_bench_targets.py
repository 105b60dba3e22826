"""The kernels' targets (``falcon_lab.bench.targets``, ``lab bench targets``): each bounded ratio at every shape from
kernels.csv rows, the fastest of a rule's forms standing for it, an earlier run's ratio beside it, one line and
exit 2 for a file that is no kernels.csv; and ``lab bench kernels`` writes them with its tables."""

from __future__ import annotations

import csv
from pathlib import Path

import torch
from typer.testing import CliRunner

from falcon_lab.bench import targets
from falcon_lab.cli import app


def kernels_csv(path: Path, rows: list[tuple[str, str, str, float | str]]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["shape", "op", "mode", "ms", "status"])
        w.writerows([(*r, "ok") for r in rows])
    return path


NOW = [("8x2048x12x64", "falcon-1a", "fwd", 0.3), ("8x2048x12x64", "fla chunk_simple_gla", "fwd", 0.6),
       ("8x2048x12x64", "falcon-1a", "fwd+bwd", 1.0), ("8x2048x12x64", "falcon-3a", "fwd+bwd", 2.0),
       ("8x2048x12x64", "falcon-1 λ>0", "fwd+bwd", 1.5), ("8x2048x12x64", "falcon-2", "fwd+bwd", 9.0),
       ("8x2048x12x64", "falcon-2 inverses", "fwd+bwd", 3.0), ("1x16384x16x128", "falcon-1a", "fwd", 0.9),
       ("1x16384x16x128", "fla chunk_simple_gla", "fwd", 1.0), ("1x16384x16x128", "falcon-3a", "fwd+bwd", ""),
       ("1x16384x16x128", "falcon-1a", "fwd+bwd", 1.0)]


def test_each_ratio_is_met_or_missed_at_its_shape_with_the_fastest_form(tmp_path: Path) -> None:
    rows = targets.evaluate(targets.read_times(kernels_csv(tmp_path / "k.csv", NOW)))
    got = {(r["target"].split()[0], r["shape"]): (round(r["ratio"], 6), r["met"]) for r in rows if r["ratio"]}
    assert got == {("falcon-1a", "8x2048x12x64"): (0.5, True), ("falcon-1a", "1x16384x16x128"): (0.9, False),
                   ("falcon-3a", "8x2048x12x64"): (2.0, False), ("falcon-2", "8x2048x12x64"): (2.0, True)}
    f2 = next(r for r in rows if r["target"].startswith("falcon-2 ") and r["shape"] == "8x2048x12x64")
    assert f2["form"] == "falcon-2 inverses" and f2["ms"] == 3.0 and f2["under_ms"] == 1.5
    # falcon-3a not measured at the long shape (no time) and falcon-1 not at all: no ratio, no row
    assert not any(r["target"].startswith("falcon-3a") and r["shape"] == "1x16384x16x128" for r in rows)
    assert not any(r["target"].startswith("falcon-1 ") for r in rows)


def test_the_table_sets_the_ratio_before_beside_the_ratio_now(tmp_path: Path) -> None:
    now = kernels_csv(tmp_path / "now" / "kernels.csv", NOW)
    before = kernels_csv(tmp_path / "before.csv", [("8x2048x12x64", "falcon-3a", "fwd+bwd", 5.5),
                                                   ("8x2048x12x64", "falcon-1a", "fwd+bwd", 1.1)])
    result = CliRunner().invoke(app, ["bench", "targets", str(now), "--against", str(before)])
    assert result.exit_code == 0, result.output
    assert "2 of 4 targets met" in result.output
    table = (tmp_path / "now" / "targets.md").read_text(encoding="utf-8")
    line = next(x for x in table.splitlines() if x.startswith("| falcon-3a"))
    assert "2 ✗ (2 / 1)" in line and "← 5" in line and "| ≤ 1.5 |" in line
    assert "**0.5** ✓" in table
    written = list(csv.DictReader((tmp_path / "now" / "targets.csv").open(encoding="utf-8")))
    assert {r["target"].split()[0] for r in written} == {"falcon-1a", "falcon-2", "falcon-3a"}


def test_a_file_that_is_no_kernels_csv_is_one_line_and_exit_2(tmp_path: Path) -> None:
    bad = tmp_path / "bad.csv"
    bad.write_text("a,b\n1,2\n", encoding="utf-8")
    kept = tmp_path / "targets.md"
    kept.write_text("earlier\n", encoding="utf-8")
    for path in (bad, tmp_path / "absent.csv"):
        result = CliRunner().invoke(app, ["bench", "targets", str(path), "--out", str(tmp_path)])
        assert result.exit_code == 2
        assert len(result.output.strip().splitlines()) == 1 and str(path) in result.output
    assert kept.read_text(encoding="utf-8") == "earlier\n"  # nothing already written is lost


def test_bench_kernels_writes_the_targets_with_its_tables(tmp_path: Path, monkeypatch) -> None:
    import falcon_lab.bench.kernels as bench

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench, "_provenance", lambda command, dtype: {
        "gpu": "none", "commit": "x", "date": "d", "command": command, "dtype": dtype, "torch": "t", "triton": "t",
        "fla": "f"})
    ms = {"falcon-1a": 1.0, "falcon-3a": 3.0}
    monkeypatch.setattr(bench, "_row", lambda op, shape, dtype, mode, rep: {
        "shape": "x".join(map(str, shape)), "op": op.name, "mode": mode, "ms": ms.get(op.name, 2.0), "status": "ok"})
    before = kernels_csv(tmp_path / "before.csv", [("1x64x2x16", "falcon-3a", "fwd+bwd", 6.0),
                                                   ("1x64x2x16", "falcon-1a", "fwd+bwd", 1.0)])
    bench.run([(1, 64, 2, 16)], ("falcon-1a", "falcon-3a"), "bf16", tmp_path / "out", command="test",
              echo=lambda line: None, against=[before])
    table = (tmp_path / "out" / "targets.md").read_text(encoding="utf-8")
    assert "3 ✗ (3 / 1) ← 6" in table
