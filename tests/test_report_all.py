"""`lab report` (and `lab report all`): REPORT.md from a small records tree copied from the real one — the five
sections, each with the command, commit, GPU and date its record states ("not recorded" where it states none),
every figure drawn and linked relatively, and nothing written into the records."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pandas as pd
import pytest
from typer.testing import CliRunner

import falcon_lab.paths
from falcon_lab.cli import app
from falcon_lab.paths import REPO_ROOT

ANSI = re.compile(r"\x1b\[[0-9;]*m")
RECORDS = REPO_ROOT / "records"
# What the fixture copies from the real records: small tables of each kind the report reads.
COPIED = ("addition/same-time/table.csv", "addition/same-time/table.md", "addition/same-time/per_width.csv",
          "addition/tiny/table.csv", "addition/tiny/table.md", "addition/tiny/per_width.csv",
          "addition/tiny/progress.csv",
          "ablation/tiny/alignment.csv", "ablation/tiny/alignment.md", "ablation/tiny/alignment_per_width.csv",
          "sweeps/regime-transformer/trials.csv", "sweeps/regime-transformer/report.md",
          "sweeps/regime-transformer/findings.md", "bench/kernels-2026-12-05/kernels.csv")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, ANSI.sub("", result.output)


def snapshot(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*") if p.is_file()}


@pytest.fixture
def records(tmp_path: Path) -> Path:
    """A records tree: the files above (kernels.md left out: its provenance is then not recorded), and one
    run of the tiny table with a positions.csv and its config beside."""
    root = tmp_path / "records"
    for name in COPIED:
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(RECORDS / name, root / name)
    regime = root / "addition" / "regime"  # a device call's record: a README and its runs' provenance
    (regime / "screen" / "r1").mkdir(parents=True)
    (regime / "README.md").write_text("# Regimes on one H200\n\n`bash records/device/regime_screen.sh` at commit "
                                      "c57fed1, 2026-12-02 01:01 UTC; then `python progress.py`.\n")
    (regime / "screen" / "r1" / "provenance.json").write_text(
        '{"commit": "c57fed1aaaa", "device": "NVIDIA H200 x1", "date": "2026-12-02T01:00:58+00:00"}')
    (root / "ablation" / "tiny" / "README.md").write_text(  # the findings the ablation section quotes
        "# The ablation\n\n- **The shift decides**: held out 74 against 0. More.\n- plain bullet\n")
    run = root / "addition" / "tiny" / "runs" / "2db318ffdb"
    run.mkdir(parents=True)
    (run / "config.yaml").write_text("task: addition\ndata:\n  widths:\n  - 1\n  - 6\n")
    pd.DataFrame([{"run": "2db318ffdb", "which": "best", "step": 900, "samples": 20, "width": n, "position": p,
                   "token": "digit" if p <= n else "eos", "accuracy": 100.0 if n <= 6 else 50.0}
                  for n in range(1, 11) for p in range(n + 2)]).to_csv(run / "positions.csv", index=False)
    return root


def test_lab_report_all_writes_every_section_with_its_provenance_and_figures(records: Path, tmp_path: Path) -> None:
    before = snapshot(records)
    results = tmp_path / "results"
    code, out = invoke("report", "all", "--records", str(records), "--results", str(results))
    assert code == 0, out
    report = results / "REPORT.md"
    assert out.startswith(f"report: {report} (")
    text = report.read_text(encoding="utf-8")
    headings = re.findall(r"^## (.+)$", text, re.MULTILINE)
    assert headings == ["1. Addition: Table 3 beside the paper", "2. Alignment ablation: timing × write pairing",
                        "3. Accuracy by width: curves and heat maps", "4. Sweeps", "5. Kernels beside fla"]
    # 1: Table 3 beside the paper, with the record's own command, commits, GPU and date
    assert ("| Falcon-1A.3 (QK-RMSNorm, ctxη, λ̄ = 0; same-time writes, no output gate) | 3/3 | 99.8 | 100.0 ± 0.0 "
            "| 85.9 | 34.8 ± 4.6 | 100.0 | 99.3 ± 1.2 | 69.0 | 0.0 ± 0.0 |") in text
    assert ("Command: `lab reproduce addition --preset same-time --results /tmp/st --out records/addition/same-time`. "
            "Commit: runs trained at 16dedb6, 2da8e26, 3d85ec9, 41d6f29, 554ef6c, 674188d, 6bdcac8, 81c0410, aef2957, "
            "c16d0fc, c1db995, e9424eb; table written at aef2957a0522. GPU: NVIDIA H100 80GB HBM3 x1; NVIDIA H200 x1. "
            "Date: 2026-12-06T04:11:42+00:00.") in text
    assert ("`records/addition/tiny` (4 of 4 runs): best val. acc. Falcon-1.3 (QK-RMSNorm, ctxη, λ̄ = 0; same-time "
            "writes, no output gate, read before write, no short conv) 99.2 ± 1.2; best held-out mean Transformer "
            "(NoPE) 30.0 ± 7.1.") in text
    assert "GPU: none (CPU: AMD EPYC)" in text
    assert ("`records/addition/regime`: Regimes on one H200 (read in `records/addition/regime/README.md`). "
            "Command: `bash records/device/regime_screen.sh`. Commit: c57fed1. GPU: NVIDIA H200 x1. "
            "Date: 2026-12-02T01:00:58+00:00. (As `records/addition/regime/README.md` and the "
            "`provenance.json` of its 1 run state.)") in text
    # 2: the ablation's table and its warning
    assert "**These numbers test the pipeline, not the rules.**" in text
    assert "| Falcon-1A.3 (QK-RMSNorm, ctxη-ctxλ) | RBW · same-time | 1/1 | 1.6 | 0.0 | 11.2 |" in text
    assert "What it answers (`records/ablation/tiny/README.md`):\n\n- **The shift decides**: held out 74 against 0.\n" in text
    assert "plain bullet" not in text
    # 4: the sweep's headlines and best trial; 5: the kernels, whose kernels.md is missing here
    assert "Best: Trial 24: val_token_acc = 32.34." in text and "**No trial learned the task.**" in text
    assert "| 4x4096x16x128 | falcon-1a | fwd+bwd | 1.204 | 0.55 | — | ok |" in text
    assert "Command: not recorded. Commit: not recorded. GPU: not recorded. Date: not recorded." in text
    # every figure linked relatively and drawn, one per kind at least
    links = re.findall(r"!\[[^\]]*\]\(([^)]+)\)", text)
    assert links and all(not Path(link).is_absolute() and (results / link).is_file() for link in links)
    for figure in ("report/addition/same-time/per_width.png", "report/addition/tiny/per_width.png",
                   "report/addition/tiny/progress.png", "report/addition/tiny/positions/positions.png",
                   "report/ablation/tiny/alignment.png", "report/ablation/tiny/alignment_per_width.png",
                   "report/sweeps/regime-transformer/slice.png", "report/sweeps/regime-transformer/contour.png",
                   "report/kernels.png"):
        assert figure in links, figure
    assert "## Not drawn" not in text
    assert snapshot(records) == before and not list(records.rglob("*.png"))


def test_lab_report_with_no_command_reports_on_the_checkouts_records(
        records: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(falcon_lab.paths, "records_root", lambda: records)
    monkeypatch.setenv("LAB_RESULTS", str(tmp_path / "elsewhere"))
    code, out = invoke("report")
    assert code == 0, out
    assert (tmp_path / "elsewhere" / "REPORT.md").is_file()
    code, out = invoke("report", "runs", "--root", str(tmp_path / "nothing"))  # the subcommands stay
    assert code == 1 and "no registry" in out


def test_the_report_is_never_written_into_the_records(records: Path) -> None:
    before = snapshot(records)
    code, out = invoke("report", "all", "--records", str(records), "--results", str(records / "out"))
    assert code == 2 and out.count("\n") == 1
    assert out.startswith(f"lab report: {records / 'out'} lies in the records")
    code, out = invoke("report", "all", "--records", str(records / "missing"), "--results", str(records.parent))
    assert code == 2 and "no such records folder" in out
    assert snapshot(records) == before


def test_the_heat_maps_read_a_compacted_positions_csv(records: Path, tmp_path: Path) -> None:
    """A run record keeps positions.csv gzipped (`lab runs compact`); the report draws its heat map the same."""
    import gzip

    run = records / "addition" / "tiny" / "runs" / "2db318ffdb"
    (run / "positions.csv.gz").write_bytes(gzip.compress((run / "positions.csv").read_bytes()))
    (run / "positions.csv").unlink()
    results = tmp_path / "results"
    code, out = invoke("report", "all", "--records", str(records), "--results", str(results), "--section", "widths")
    assert code == 0, out
    text = (results / "REPORT.md").read_text(encoding="utf-8")
    assert "report/addition/tiny/positions/positions.png" in text
    assert (results / "report/addition/tiny/positions/positions.png").is_file()


def test_sections_named_are_the_sections_written_in_their_order(records: Path, tmp_path: Path) -> None:
    results = tmp_path / "results"
    code, out = invoke("report", "all", "--records", str(records), "--results", str(results),
                       "--section", "kernels", "--section", "addition")
    assert code == 0, out
    text = (results / "REPORT.md").read_text(encoding="utf-8")
    headings = re.findall(r"^## (\d)\.", text, flags=re.M)
    assert headings == ["1", "5"], headings
    assert "Sections drawn: addition, kernels (of addition, ablation, widths, sweeps, kernels)." in text
    assert sorted(p.relative_to(results).as_posix() for p in results.rglob("*.png")) == ["report/kernels.png"]
    code, out = invoke("report", "all", "--records", str(records), "--results", str(results), "--section", "tables")
    assert code == 2 and "unknown report section(s) tables; the sections are addition, ablation, widths" in out



def with_tables(records: Path, *folders: str) -> None:
    """Copies of the same-time table's table.csv and table.md in records/addition/<folder>/ for each folder."""
    for name in folders:
        folder = records / "addition" / name
        folder.mkdir(parents=True)
        for file in ("table.csv", "table.md"):
            shutil.copy2(records / "addition" / "same-time" / file, folder / file)


def test_table3_by_the_papers_method_is_shown_whole_beside_table3(records: Path, tmp_path: Path) -> None:
    # records/addition/paper-method (the experiment addition-paper-method): the whole table, not one line of the
    # other regimes
    with_tables(records, "paper-method")
    results = tmp_path / "results"
    code, out = invoke("report", "all", "--records", str(records), "--results", str(results), "--section", "addition")
    assert code == 0, out
    text = (results / "REPORT.md").read_text(encoding="utf-8")
    method = text.split("### Table 3 by the paper's method\n", 1)[1].split("### The other regimes", 1)[0]
    assert "(As `records/addition/paper-method/table.md` states.)" in method
    assert ("| Falcon-1A.3 (QK-RMSNorm, ctxη, λ̄ = 0; same-time writes, no output gate) | 3/3 | 99.8 | 100.0 ± 0.0 "
            "| 85.9 | 34.8 ± 4.6 |") in method
    assert "`records/addition/paper-method`" not in text.split("### The other regimes", 1)[1]


def test_the_table_of_one_part_of_an_experiment_is_listed_among_the_regimes(records: Path, tmp_path: Path) -> None:
    # an experiment of several parts keeps each part's table in a folder of its own: addition/<record>/<part>/
    with_tables(records, "shifted-positions/sinusoidal")
    results = tmp_path / "results"
    code, out = invoke("report", "all", "--records", str(records), "--results", str(results), "--section", "addition")
    assert code == 0, out
    regimes = (results / "REPORT.md").read_text(encoding="utf-8").split("### The other regimes", 1)[1]
    assert "- `records/addition/shifted-positions/sinusoidal` (39 of 39 runs): best val. acc." in regimes
    assert "### Table 3 by the paper's method" not in regimes
