"""Bring runs made elsewhere (another machine, a cluster job, a device call) into a results folder.

A results folder is `runs/<id>/` plus the registry `lab.db`. Merging a copy of another results folder
takes each of its runs that is new here, or that went further there than here, folder and registry row
together; a run that went at least as far here is kept. "Further" is: finished beats not finished, then
more steps. So a run stopped at step 1700 here is not replaced by the same run started again elsewhere
and stopped at step 800, and merging the same copy twice changes nothing the second time.

The copy may also be a folder of run records without a registry, as the tracks keep them under
`records/<track>/.../runs/<id>/` (config.yaml, provenance.json, run.json, metrics and logs, no weights):
each record's registry row is rebuilt from those three files, and nothing in the copy is written. So a
fresh clone, whose `results/lab.db` and `results/runs/` are not in git, gets back the finished runs that its tables were made from, and
`lab reproduce ... --table-only` or a rerun that skips them works again.

The copy may also be an archive (`.tgz`, `.tar.gz`, `.tar`) of such records, as `lab experiment run
--snapshot-dir` writes them (falcon_lab.archive): it is unpacked into a temporary folder and merged from
there.

A run folder is replaced whole, through a temporary folder beside it and two renames, and its registry
row is written after it: a merge stopped part-way leaves every folder whole, and running it again
finishes it. A run training here (its folder locked) is left alone.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from falcon_lab.archive import extract_archive, is_archive
from falcon_lab.runs import Registry, RunBusy, RunDir, RunLock

# What a merge did with one run of the copy.
ACTIONS = ("copied", "replaced", "kept", "busy", "missing")


@dataclass(frozen=True)
class Merged:
    """One run of the copy: `action` (one of ACTIONS), and its registry rows here (before) and there."""

    run_id: str
    action: str
    here: dict[str, Any] | None
    there: dict[str, Any]

    def line(self) -> str:
        """One line for a user: the action, the run, and how far it went on each side."""
        r = self.there
        name = f"{r.get('mixer') or '?'} ({r.get('task') or '?'})"
        text = f"{self.action:<8} {self.run_id}  {name}  copy: {reach(r)}"
        if self.here is not None:
            text += f"  here: {reach(self.here)}"
        if self.action == "busy":
            text += "  (training here: left alone)"
        if self.action == "missing":
            text += "  (the copy has no folder for it: left alone)"
        return text


def reach(row: dict[str, Any]) -> str:
    """How far a run went, as its registry row says: e.g. `finished 2000/2000`, `stopped 825/2000`."""
    steps = row.get("steps")
    of = f"/{row['max_steps']}" if row.get("max_steps") is not None else ""
    return f"{row.get('status') or 'unknown'} {steps if steps is not None else '?'}{of}"


def progress(row: dict[str, Any]) -> tuple[int, int]:
    """The order runs are compared in: finished first, then more steps."""
    return (row.get("status") == "finished", int(row.get("steps") or 0))


def record_row(folder: Path) -> dict[str, Any]:
    """The registry row of the run record `folder`, rebuilt from its run.json, config.yaml and
    provenance.json (the last two may be missing: their columns stay empty). ValueError naming the file
    that cannot be read."""
    def read(name: str, parse: Callable[[str], Any]) -> dict[str, Any]:
        path = folder / name
        if not path.is_file():
            return {}
        try:
            data = parse(path.read_text(encoding="utf-8"))
        except (ValueError, yaml.YAMLError) as err:
            raise ValueError(f"the run record {path} cannot be read: {err}") from None
        if not isinstance(data, dict):
            raise ValueError(f"the run record {path} is not a mapping")
        return data

    state = read("run.json", json.loads)
    config = read("config.yaml", yaml.safe_load)
    info = read("provenance.json", json.loads)
    metrics = state.get("metrics")
    row: dict[str, Any] = {
        "id": state.get("id") or folder.name, "task": config.get("task"), "mixer": config.get("mixer"),
        "preset": config.get("preset"), "status": state.get("status"), "steps": state.get("steps"),
        "max_steps": state.get("max_steps"), "n_params": info.get("n_params"),
        "metrics": json.dumps(metrics) if metrics is not None else None,
        "config": json.dumps(config) if config else None, "commit": info.get("commit"),
        "dirty": None if info.get("dirty") is None else int(bool(info["dirty"])),
        "host": info.get("hostname"), "device": info.get("device"), "message": state.get("message"),
        "created_at": state.get("created_at"), "updated_at": state.get("updated_at"),
        "finished_at": state.get("updated_at") if state.get("status") == "finished" else None,
    }
    if isinstance(metrics, dict):
        row.update(final_loss=metrics.get("loss"), final_val_loss=metrics.get("val_loss"),
                   final_val_acc=metrics.get("val_acc"))
    return row


def source_runs(source: Path) -> list[tuple[dict[str, Any], Path]]:
    """(registry row, folder) of each run of the copy `source`: a results folder's registry rows with
    their `runs/<id>/` folders, else the run records `source/<id>/run.json` (or `source/runs/<id>/run.json`)
    with rows rebuilt from them. ValueError naming `source` when it is neither."""
    if (source / "lab.db").is_file():
        return [(row, source / "runs" / row["id"]) for row in Registry(source / "lab.db").rows()]
    for base in (source, source / "runs"):
        records = sorted(p.parent for p in base.glob("*/run.json")) if base.is_dir() else []
        if records:
            return [(record_row(folder), folder) for folder in records]
    if (source / "snapshot.json").is_file():  # a snapshot taken before any run had finished
        return []
    raise ValueError(f"the copy {source} has no registry lab.db and no run records (<id>/run.json): "
                     "not a results folder")


def merge_results(source: str | Path, into: str | Path, dry_run: bool = False,
                  on_run: Callable[[Merged], None] | None = None) -> list[Merged]:
    """Merge the results folder or run records `source` into `into` (see the module's docstring);
    `dry_run` decides and reports without writing. `on_run` is called with each decision as it is carried
    out. ValueError when `source` is neither or is `into` itself."""
    source, into = Path(source).resolve(), Path(into).resolve()
    if is_archive(source):
        with tempfile.TemporaryDirectory(prefix="lab-merge-") as folder:
            return merge_results(extract_archive(source, Path(folder)), into, dry_run, on_run)
    if source == into:
        raise ValueError(f"the copy and the results folder are the same folder, {source}")
    theirs = source_runs(source)
    into.mkdir(parents=True, exist_ok=True)
    ours = Registry(into / "lab.db")
    done = []
    for there, folder in theirs:
        run_id = there["id"]
        here = ours.get(run_id)
        if not folder.is_dir():
            action = "missing"
        elif here is not None and progress(here) >= progress(there):
            action = "kept"
        else:
            action = "copied" if here is None else "replaced"
        if action in ("copied", "replaced") and not dry_run:
            target = RunDir(into / "runs" / run_id)
            try:
                with RunLock(target):
                    replace_folder(folder, target.root)
            except RunBusy:
                action = "busy"
            else:
                put_row(ours, there, target)
        merged = Merged(run_id, action, here, there)
        done.append(merged)
        if on_run is not None:
            on_run(merged)
    return done


def replace_folder(source: Path, target: Path) -> None:
    """Make `target` a copy of the folder `source` (without its lock file), never leaving it half-made."""
    target.parent.mkdir(parents=True, exist_ok=True)
    fresh = target.parent / f".{target.name}.merging"
    stale = target.parent / f".{target.name}.replaced"
    for leftover in (fresh, stale):  # from a merge stopped part-way
        shutil.rmtree(leftover, ignore_errors=True)
    shutil.copytree(source, fresh, ignore=shutil.ignore_patterns(".lock"))
    if target.exists():
        target.rename(stale)  # the lock this merge holds stays with the old folder's inode, gone below
        fresh.rename(target)
        shutil.rmtree(stale)
    else:
        fresh.rename(target)


def put_row(registry: Registry, row: dict[str, Any], target: RunDir) -> None:
    """Write `row` into `registry` as it is, but for the paths, which now point at `target`."""
    registry.put({**row, "run_dir": str(target.root), "checkpoint_dir": str(target.checkpoints)})
