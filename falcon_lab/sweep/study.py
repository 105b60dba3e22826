"""The Optuna study of a sweep: samplers by name, the pruner, and creating or resuming a study."""

from __future__ import annotations

import importlib.util
import warnings
from typing import Any

import optuna

from falcon_lab.runs import now
from falcon_lab.sweep.space import Space, grid_of
from falcon_lab.sweep.spec import SAMPLERS, SweepSpec

# Samplers whose draws follow one shared sequence indexed through the study: every worker must use
# the same seed. The others get seed + worker index, so workers do not draw the same values.
SHARED_SEED = ("qmc", "grid")


def make_sampler(spec: SweepSpec, space: Space, worker: int = 0) -> optuna.samplers.BaseSampler:
    """The sampler `spec.sampler` names. TPE is multivariate (grouped, for conditional spaces) with the
    constant liar, so parallel workers do not crowd one point."""
    name = spec.sampler
    seed = spec.seed if name in SHARED_SEED else spec.seed + worker
    s = optuna.samplers
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
        if name == "tpe":
            return s.TPESampler(multivariate=True, group=True, constant_liar=True, seed=seed)
        if name == "random":
            return s.RandomSampler(seed=seed)
        if name == "cmaes":
            if importlib.util.find_spec("cmaes") is None:
                raise ValueError("--sampler cmaes needs the package cmaes: pip install cmaes")
            return s.CmaEsSampler(seed=seed, warn_independent_sampling=False)
        if name == "qmc":
            return s.QMCSampler(seed=seed, warn_independent_sampling=False)
        if name == "grid":
            return s.GridSampler(grid_of(space), seed=seed)
        if name == "bruteforce":
            grid_of(space)  # the same check: every parameter must be discrete
            return s.BruteForceSampler(seed=seed)
        if name == "nsga2":
            return s.NSGAIISampler(seed=seed)
        if name == "nsga3":
            return s.NSGAIIISampler(seed=seed)
        if name == "gp":
            return s.GPSampler(seed=seed)
    raise ValueError(f"--sampler {name!r} is not accepted; accepted: {', '.join(SAMPLERS)}")


def grid_size(space: Space) -> int:
    """How many points the grid sampler visits."""
    size = 1
    for values in grid_of(space).values():
        size *= len(values)
    return size


def make_pruner(spec: SweepSpec, val_every: int, max_steps: int | None) -> optuna.pruners.BasePruner:
    """Hyperband over training steps, from the first evaluation (or `--prune-after` steps, when later) to
    the longest run (`max_steps`; "auto" when the space searches the run length); no pruning for two
    objectives or `--pruner none`. A late first rung keeps a signal that is flat early (accuracy before
    a model has found the task) from deciding which trials go on."""
    if spec.pruner == "none" or spec.objective == "multi":
        return optuna.pruners.NopPruner()
    return optuna.pruners.HyperbandPruner(min_resource=max(val_every, spec.prune_after),
                                          max_resource=max_steps or "auto", reduction_factor=3)


class StudyMismatch(ValueError):
    """The study exists with other settings than this command's."""


def open_study(spec: SweepSpec, storage: Any, space: Space, sampler: optuna.samplers.BaseSampler,
               pruner: optuna.pruners.BasePruner, create: bool = False) -> optuna.Study:
    """Load the study (create it first when `create`); StudyMismatch when it was made with another
    space, objective, preset, mixer or `--set`."""
    if create:
        study = optuna.create_study(study_name=spec.study, storage=storage, sampler=sampler, pruner=pruner,
                                    directions=spec.directions, load_if_exists=True)
    else:
        study = optuna.load_study(study_name=spec.study, storage=storage, sampler=sampler, pruner=pruner)
    attrs = study.user_attrs
    mine = spec.identity(space)
    if "identity" not in attrs:
        if create:
            study.set_user_attr("identity", mine)
            study.set_user_attr("space_file", str(space.path))
            study.set_user_attr("space_text", space.path.read_text(encoding="utf-8"))
            study.set_user_attr("metric_names", spec.metric_names)
        return study
    theirs = attrs["identity"]
    for key, value in mine.items():
        if theirs.get(key) != value:
            what = {"space": "search space (file contents)", "sets": "--set"}.get(key, f"--{key}")
            raise StudyMismatch(f"study {spec.study!r} was made with {what} {theirs.get(key)!r}, this command "
                                f"gives {value!r}; use the same settings to resume it, or another --study")
    return study


def record_command(study: optuna.Study, spec: SweepSpec) -> None:
    """Append this invocation (date, command, sampler, workers' budget) to the study's history."""
    history = list(study.user_attrs.get("commands", []))
    history.append({"date": now(), "command": spec.command, "sampler": spec.sampler, "pruner": spec.pruner,
                    "seed": spec.seed, "trials": spec.trials})
    study.set_user_attr("commands", history)
