"""The lab's experiments: one short file per question, each declaring an `EXPERIMENT` (declare.Experiment).

Every module of this package but the machinery (`declare`, `runner`) is an experiment file; `experiments()` finds
them all and `get(name)` one of them by name (its record's path under `records/` with `/` as `-`).
`lab experiment list | run NAME | status NAME | report NAME` drives them (falcon_lab/cli/experiment.py).
"""

from __future__ import annotations

import importlib
import pkgutil

from falcon_lab.experiments.declare import Experiment

MACHINERY = ("declare", "runner")


def experiments() -> dict[str, Experiment]:
    """Every declared experiment by name, in the order of their files' names. ValueError when a file declares
    no EXPERIMENT or two declare one name."""
    found: dict[str, Experiment] = {}
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if module.name in MACHINERY or module.name.startswith("_"):
            continue
        declared = getattr(importlib.import_module(f"{__name__}.{module.name}"), "EXPERIMENT", None)
        if not isinstance(declared, Experiment):
            raise ValueError(f"falcon_lab/experiments/{module.name}.py declares no EXPERIMENT")
        if declared.name in found:
            raise ValueError(f"two experiment files declare {declared.name!r}")
        found[declared.name] = declared
    return found


def get(name: str) -> Experiment:
    """The experiment called `name`; ValueError naming the accepted ones."""
    known = experiments()
    if name not in known:
        raise ValueError(f"unknown experiment {name!r}; accepted: {', '.join(known)}")
    return known[name]
