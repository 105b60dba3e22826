"""Where the lab writes and where its committed evidence lies.

Every command writes under one results folder: `$LAB_RESULTS`, else `results/` of the source checkout
(git-ignored entirely), else `./results`. Committed evidence (tables, run records, figures, the scripts of
the device calls) lies in `records/`, which no command writes to unless a user names it; a command reads
from it only where it is given a path there (`lab runs merge records/addition/packed/runs`).
"""

from __future__ import annotations

import os
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]


def in_checkout() -> bool:
    """Whether lab runs from a source checkout (an editable install or the tree itself)."""
    return (REPO_ROOT / "pyproject.toml").exists()


def results_root() -> Path:
    """The folder every command writes under: $LAB_RESULTS, else the checkout's `results/` when lab
    runs from a source checkout, else `./results`. ConfigError when $LAB_RESULTS names a file."""
    if os.environ.get("LAB_RESULTS"):
        root = Path(os.environ["LAB_RESULTS"]).resolve()
        if root.exists() and not root.is_dir():
            from falcon_lab.typed import ConfigError

            raise ConfigError(f"LAB_RESULTS={os.environ['LAB_RESULTS']} is a file, not a folder; point it at a "
                              f"folder (made if missing)")
        return root
    if in_checkout():
        return REPO_ROOT / "results"
    return Path("results").resolve()


def cache_root(results: Path) -> Path:
    """Where the runs of a results folder keep torch.compile's and Triton's on-disk caches
    (falcon_lab.train.run.compile_caches)."""
    return results / "cache"


def records_root() -> Path:
    """The committed evidence: the checkout's `records/` (`./records` outside a checkout). Read only."""
    return REPO_ROOT / "records" if in_checkout() else Path("records").resolve()


def results_path(*parts: str) -> Path:
    """`results_root()` joined with `parts`: the default place of a command's output."""
    return results_root().joinpath(*parts)


def inside_records(path: str | Path) -> bool:
    """Whether `path` lies under `records_root()` (a command told to write there is writing evidence)."""
    try:
        Path(path).resolve().relative_to(records_root().resolve())
    except ValueError:
        return False
    return True
