"""`lab runs merge`: runs made on another machine brought into a results folder."""

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.merge import merge_results
from falcon_lab.runs import Registry, RunDir, RunLock

ANSI = re.compile(r"\x1b\[[0-9;]*m")


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, ANSI.sub("", result.output)


def add_run(results: Path, run_id: str, status: str, steps: int, note: str = "", folder: bool = True) -> None:
    """A run of `steps` of 2000 in `results`: its registry row and a folder with a log saying `note`."""
    if folder:
        root = results / "runs" / run_id
        root.mkdir(parents=True, exist_ok=True)
        (root / "train.log").write_text(f"{note}\n", encoding="utf-8")
    Registry(results / "lab.db").upsert(run_id, task="addition", mixer="falcon-1.3", status=status, steps=steps,
                                        max_steps=2000, run_dir=str(results / "runs" / run_id),
                                        created_at="2026-11-30T01:00:00+00:00")


def log(results: Path, run_id: str) -> str:
    return (results / "runs" / run_id / "train.log").read_text(encoding="utf-8").strip()


def two_folders(tmp_path: Path) -> tuple[Path, Path]:
    """`here` and a copy `there` made elsewhere, one run of each kind."""
    here, there = tmp_path / "here", tmp_path / "there"
    add_run(here, "further", "stopped", 800, "here")       # went further there: replaced
    add_run(there, "further", "finished", 2000, "there")
    add_run(here, "restart", "stopped", 1701, "here")      # started again there, stopped sooner: kept
    add_run(there, "restart", "stopped", 825, "there")
    add_run(here, "same", "finished", 2000, "here")        # as far on both sides: kept
    add_run(there, "same", "finished", 2000, "there")
    add_run(there, "new", "stopped", 300, "there")         # not here: copied
    add_run(there, "nofolder", "finished", 2000, folder=False)  # a row without its folder: left alone
    add_run(here, "only-here", "stopped", 100, "here")     # not in the copy: untouched
    return here, there


def test_a_merge_takes_the_runs_that_went_further_there_and_keeps_the_rest(tmp_path: Path) -> None:
    here, there = two_folders(tmp_path)
    theirs = Registry(there / "lab.db").get("further")
    code, text = invoke("runs", "merge", str(there), "--results", str(here))
    assert code == 0, text
    lines = text.strip().splitlines()
    actions = {line.split()[1]: line.split()[0] for line in lines[:-1]}
    assert actions == {"further": "replaced", "restart": "kept", "same": "kept", "new": "copied",
                       "nofolder": "missing"}
    assert "restart  falcon-1.3 (addition)  copy: stopped 825/2000  here: stopped 1701/2000" in text
    assert lines[-1] == f"merged {there} into {here}: 5 runs (1 copied, 1 replaced, 2 kept, 1 missing)"
    assert [log(here, r) for r in ("further", "restart", "same", "new", "only-here")] == [
        "there", "here", "here", "there", "here"]
    ours = Registry(here / "lab.db")
    row = ours.get("further")
    assert (row["status"], row["steps"]) == ("finished", 2000)
    assert row["updated_at"] == theirs["updated_at"]  # the run's own time, not the merge's
    assert row["run_dir"] == str(here / "runs" / "further")  # paths point here now
    assert ours.get("restart")["steps"] == 1701 and ours.get("nofolder") is None
    assert not list((here / "runs").glob(".*"))  # no temporary folder left
    # merging the same copy again changes nothing
    code, text = invoke("runs", "merge", str(there), "--results", str(here))
    assert text.strip().splitlines()[-1].endswith("5 runs (4 kept, 1 missing)")


def test_a_dry_run_says_what_it_would_do_and_writes_nothing(tmp_path: Path) -> None:
    here, there = two_folders(tmp_path)
    before = (here / "lab.db").read_bytes()
    code, text = invoke("runs", "merge", str(there), "--results", str(here), "--dry-run")
    assert code == 0 and text.strip().splitlines()[-1].startswith(f"would merge {there} into {here}: 5 runs")
    assert (here / "lab.db").read_bytes() == before and not (here / "runs" / "new").exists()
    assert log(here, "further") == "here"


def test_a_run_training_here_is_left_alone(tmp_path: Path) -> None:
    here, there = two_folders(tmp_path)
    with RunLock(RunDir(here / "runs" / "further")):
        done = {m.run_id: m.action for m in merge_results(there, here)}
    assert done["further"] == "busy" and log(here, "further") == "here"
    assert Registry(here / "lab.db").get("further")["steps"] == 800
    assert done["new"] == "copied"


def test_a_merge_stopped_part_way_is_finished_by_the_next(tmp_path: Path) -> None:
    here, there = two_folders(tmp_path)
    # what a kill between the copy and the renames leaves: a half-made temporary folder
    (here / "runs" / ".further.merging").mkdir()
    (here / "runs" / ".further.merging" / "half").write_text("x", encoding="utf-8")
    merge_results(there, here)
    assert log(here, "further") == "there" and not (here / "runs" / ".further.merging").exists()
    assert not (here / "runs" / "further" / "half").exists()


def test_bad_folders_are_refused_in_one_line(tmp_path: Path) -> None:
    here, _ = two_folders(tmp_path)
    code, text = invoke("runs", "merge", str(tmp_path / "nowhere"), "--results", str(here))
    assert code == 2 and text.count("\n") == 1
    assert text.startswith(f"lab runs merge: the copy {tmp_path / 'nowhere'} has no registry lab.db")
    code, text = invoke("runs", "merge", str(here), "--results", str(here))
    assert code == 2 and "the copy and the results folder are the same folder" in text


def add_record(records: Path, run_id: str, status: str, steps: int) -> Path:
    """A run record as a track keeps it in git: run.json, config.yaml, provenance.json and a log."""
    root = records / run_id
    root.mkdir(parents=True)
    (root / "run.json").write_text(
        f'{{"id": "{run_id}", "status": "{status}", "steps": {steps}, "max_steps": 2000, '
        '"created_at": "2026-11-30T01:00:00+00:00", "updated_at": "2026-11-30T02:00:00+00:00", '
        '"message": null, "metrics": {"loss": 0.5, "val_acc": 0.75, "best_val_acc": 80.0}}', encoding="utf-8")
    (root / "config.yaml").write_text("task: addition\nmixer: falcon-2\npreset: addition-paper\n"
                                      "train:\n  max_steps: 2000\n  seed: 1\n", encoding="utf-8")
    (root / "provenance.json").write_text('{"commit": "abc123", "dirty": false, "hostname": "gpu-host", '
                                          '"device": "NVIDIA H200 x1", "n_params": 1234}', encoding="utf-8")
    (root / "train.log").write_text("record\n", encoding="utf-8")
    return root


def test_run_records_without_a_registry_are_merged_with_rows_rebuilt_from_their_files(tmp_path: Path) -> None:
    records, here = tmp_path / "track" / "runs", tmp_path / "here"
    add_record(records, "done", "finished", 2000)
    add_record(records, "part", "stopped", 700)
    add_run(here, "part", "stopped", 1500, "here")  # went further here: kept
    code, text = invoke("runs", "merge", str(records.parent), "--results", str(here))  # the track folder works too
    assert code == 0, text
    assert "copied   done  falcon-2 (addition)  copy: finished 2000/2000" in text
    assert "kept     part" in text
    row = Registry(here / "lab.db").get("done")
    assert row is not None
    assert (row["status"], row["steps"], row["max_steps"], row["commit"], row["dirty"]) == (
        "finished", 2000, 2000, "abc123", 0)
    assert (row["device"], row["host"], row["n_params"], row["final_val_acc"]) == (
        "NVIDIA H200 x1", "gpu-host", 1234, 0.75)
    assert json.loads(row["metrics"])["best_val_acc"] == 80.0 and json.loads(row["config"])["train"]["seed"] == 1
    assert row["finished_at"] == "2026-11-30T02:00:00+00:00" and row["run_dir"] == str(here / "runs" / "done")
    assert log(here, "done") == "record" and log(here, "part") == "here"
    # Merging the records again changes nothing.
    code, text = invoke("runs", "merge", str(records), "--results", str(here))
    assert code == 0 and "(2 kept)" in text


def test_an_unreadable_run_record_is_named(tmp_path: Path) -> None:
    records = tmp_path / "runs"
    (add_record(records, "bad", "finished", 2000) / "run.json").write_text("{not json", encoding="utf-8")
    code, text = invoke("runs", "merge", str(records), "--results", str(tmp_path / "here"))
    assert code == 2 and text.startswith(f"lab runs merge: the run record {records / 'bad' / 'run.json'} cannot be read")
    assert not (tmp_path / "here" / "runs").exists()
