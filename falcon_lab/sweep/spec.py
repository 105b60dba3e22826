"""What a sweep is: the study, its space, objective, sampler and base settings, and each trial's `lab train`
configuration.

A trial's configuration resolves in layers, each overriding the one before: the preset, the space's
`mixer` and `fixed` settings, the command line's `--set`, the sweep's own settings (evaluation on, one
device per trial), the trial's parameters, then `--mixer`.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from falcon_lab.config import ConfigError, RunConfig, load_config
from falcon_lab.sweep.space import Param, Space, SpaceError, load_space

OBJECTIVES = ("val_acc", "val_token_acc", "multi", "ood_mean")
# Objectives that read the held-out widths: a study that maximises one tunes on the test set, so its best
# trial's held-out numbers are no longer held out. Accepted only when named, with a warning.
HELD_OUT_OBJECTIVES = ("ood_mean",)
PRUNERS = ("hyperband", "none")
SAMPLERS = ("tpe", "random", "cmaes", "qmc", "grid", "bruteforce", "nsga2", "nsga3", "gp")
# Settings every trial needs: the objective is read from the addition evaluation, and a worker owns
# one device.
SWEEP_SETTINGS = {"eval.enabled": True, "train.devices": 1, "train.num_nodes": 1}
# The run's final metric each objective maximises (falcon_lab.eval.callback: the evaluation at the step
# with the best validation accuracy, as the paper picks its checkpoint) and the evaluation column
# reported at each evaluation step for pruning. `val_token_acc` (per-token accuracy on widths 1-32) is the
# smooth signal for regime searches where whole answers are still all wrong: it takes the last evaluation.
FINAL_METRIC = {"ood_mean": "best_ood_mean", "val_acc": "best_val_acc", "val_token_acc": "last_val_token_acc",
                "multi": "best_val_acc"}
STEP_METRIC = {"ood_mean": "ood_mean", "val_acc": "val_acc", "val_token_acc": "val_token_acc", "multi": "val_acc"}


@dataclass
class SweepSpec:
    """Everything a worker process needs to run trials of a study (JSON round-trips)."""

    study: str
    space: str
    storage: str
    results: str
    trials: int
    objective: str = "val_acc"
    sampler: str = "tpe"
    pruner: str = "hyperband"
    seed: int = field(default_factory=lambda: secrets.randbelow(2**31))
    preset: str | None = None
    mixer: str | None = None
    sets: list[str] = field(default_factory=list)
    heartbeat: int = 60
    prune_after: int = 0
    command: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self))

    @classmethod
    def from_json(cls, text: str) -> SweepSpec:
        return cls(**json.loads(text))

    @property
    def study_dir(self) -> Path:
        """`<results>/sweeps/<study>`: trials, logs, plots and the report."""
        return Path(self.results) / "sweeps" / self.study

    def trial_dir(self, number: int) -> Path:
        return self.study_dir / "trials" / str(number)

    @property
    def directions(self) -> list[str]:
        return ["maximize", "maximize"] if self.objective == "multi" else ["maximize"]

    @property
    def metric_names(self) -> list[str]:
        """Names of the objective values, in order."""
        return ["val_acc", "tokens_per_s"] if self.objective == "multi" else [self.objective]

    def identity(self, space: Space) -> dict[str, Any]:
        """What a study is bound to: resuming it with other values would mix incomparable trials."""
        return {"space": space.sha, "objective": self.objective, "preset": self.preset, "mixer": self.mixer,
                "sets": list(self.sets)}


def check_spec(spec: SweepSpec) -> None:
    """ValueError naming the option when a choice of the spec is not accepted."""
    if spec.objective not in OBJECTIVES:
        raise ValueError(f"--objective {spec.objective!r} is not accepted; accepted: {', '.join(OBJECTIVES)}")
    if spec.sampler not in SAMPLERS:
        raise ValueError(f"--sampler {spec.sampler!r} is not accepted; accepted: {', '.join(SAMPLERS)}")
    if spec.pruner not in PRUNERS:
        raise ValueError(f"--pruner {spec.pruner!r} is not accepted; accepted: {', '.join(PRUNERS)}")
    if spec.trials < 1:
        raise ValueError(f"--trials must be >= 1, got {spec.trials}")
    if spec.heartbeat < 1:
        raise ValueError(f"--heartbeat must be >= 1 second, got {spec.heartbeat}")
    if spec.prune_after < 0:
        raise ValueError(f"--prune-after must be >= 0 steps, got {spec.prune_after}")


def _text(value: Any) -> str:
    """A value as the right-hand side of a `key=value` override that falcon_lab.config parses back to it."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


def _overrides(pairs: Sequence[tuple[str, Any]]) -> list[str]:
    return [f"{key}={_text(value)}" for key, value in pairs]


def _set_keys(sets: Sequence[str]) -> list[str]:
    return [item.partition("=")[0].strip() for item in sets]


def check_base(spec: SweepSpec, space: Space) -> None:
    """ValueError when the command line and the space disagree on who sets what."""
    keys = space.keys()
    for key in _set_keys(spec.sets):
        if key in keys:
            raise ValueError(f"--set {key} conflicts with the space {space.path}, whose parameters set {key}")
        if key in SWEEP_SETTINGS or key == "mixer":
            what = "--mixer" if key == "mixer" else "the sweep itself"
            raise ValueError(f"--set {key} is not accepted in a sweep: {what} sets it")
    if spec.mixer is not None and "mixer" in keys:
        raise ValueError(f"--mixer {spec.mixer} conflicts with the space {space.path}, "
                         f"whose parameters choose the mixer")
    if spec.mixer is None and space.mixer is None and "mixer" not in keys:
        raise ValueError(f"the space {space.path} fixes no mixer; give --mixer NAME")


def trial_config(spec: SweepSpec, space: Space, values: Mapping[str, Any]) -> RunConfig:
    """The `lab train` configuration of a trial whose active parameters took `values`."""
    layers: list[tuple[str, Any]] = []
    if space.mixer is not None:
        layers.append(("mixer", space.mixer))
    layers += list(space.fixed.items())
    overrides = [*_overrides(layers), *spec.sets, *_overrides(list(SWEEP_SETTINGS.items())),
                 *_overrides(space.settings(values))]
    return load_config(spec.preset or space.preset, overrides=overrides, mixer=spec.mixer)


def check_space(spec: SweepSpec, space: Space) -> None:
    """Build a trial configuration for each end of every range and every choice (with the values its
    conditions need and the mixer, other parameters left out); SpaceError naming the file, the
    parameter and the value falcon_lab.config rejects."""
    check_base(spec, space)
    try:
        trial_config(spec, space, _assignment(space))
    except ConfigError as err:
        raise SpaceError(f"{space.path}: the base settings are not accepted: {err}") from None
    for p in space.params:
        for value in p.extremes():
            values = _assignment(space, p, value)
            if p.name not in values:
                raise SpaceError(f"{space.path}: parameter {p.name}: its conditions can never hold together")
            try:
                trial_config(spec, space, values)
            except ConfigError as err:
                raise SpaceError(f"{space.path}: parameter {p.name}: value {value!r} is not accepted: {err}") from None


def _assignment(space: Space, p: Param | None = None, value: Any = None) -> dict[str, Any]:
    """p = value, the values its conditions need, and the mixer's first choice; nothing else."""
    needs = _requirements(space, p) if p is not None else {}
    values: dict[str, Any] = {}
    for q in space.params:
        if not q.active(values):
            continue
        if q is p:
            values[q.name] = value
        elif q.name in needs:
            values[q.name] = first_value(q, needs[q.name])
        elif q.key == "mixer":
            values[q.name] = first_value(q)
    return values


def first_value(p: Param, accepted: Sequence[Any] | None = None) -> Any:
    """The first of `accepted`, else p's first choice or the low end of its range."""
    if accepted:
        return accepted[0]
    return p.choices[0] if p.type == "categorical" else p.low


def _requirements(space: Space, p: Param) -> dict[str, tuple[Any, ...]]:
    """The values p's conditions (and theirs, transitively) ask of earlier parameters."""
    needs: dict[str, tuple[Any, ...]] = {}
    todo = [p]
    while todo:
        q = todo.pop()
        for name, accepted in q.when.items():
            prior = needs.get(name)
            needs[name] = tuple(v for v in accepted if prior is None or v in prior)
            todo.append(space.param(name))
    return needs


def open_space(spec: SweepSpec) -> Space:
    """The spec's space, parsed."""
    return load_space(spec.space)
