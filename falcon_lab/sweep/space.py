"""Search spaces: a small typed YAML schema mapped onto `lab train` configuration keys.

A space file holds:

    preset: addition-paper          # optional: the base preset (the command line's --preset wins)
    mixer: falcon-1a                # optional: the base mixer (--mixer wins; a `mixer` parameter excludes both)
    fixed: {eval.n_per_length: 100} # optional: settings every trial gets
    params:                         # the searched parameters, in the order they are drawn
      lr: {key: optim.lr, type: float, low: 1.0e-4, high: 1.0e-2, log: true}
      gain: {key: model.mixer_options.gain, type: categorical, choices: [ctx_beta, ctx_eta, const_beta]}
      beta: {key: model.mixer_options.beta, type: float, low: 0.1, high: 1.9, when: {gain: const_beta}}

A parameter is `float` or `int` (`low`, `high`, optional `log`, optional `step`) or `categorical`
(`choices`; `also` sets further keys per choice, one value per choice). `when: {param: value}` (or a
list of values) makes it exist only in trials where each named categorical parameter, drawn before it,
took one of those values. A parameter without `key` is a switch: it only gates others through `when`.
Every mistake raises SpaceError, one line naming the file, the parameter and the problem.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from falcon_lab.typed import yaml_problem

TYPES = ("float", "int", "categorical")
TOP_FIELDS = ("preset", "mixer", "fixed", "params")
FIELDS = {
    "float": ("key", "type", "low", "high", "log", "step", "when"),
    "int": ("key", "type", "low", "high", "log", "step", "when"),
    "categorical": ("key", "type", "choices", "also", "when"),
}
Scalar = str | int | float | bool | None


class SpaceError(ValueError):
    """A malformed search space; the message is one line naming the file, the parameter and the problem."""


@dataclass(frozen=True)
class Param:
    """One searched parameter (see the module docstring)."""

    name: str
    type: str
    key: str | None = None
    low: float | int | None = None
    high: float | int | None = None
    log: bool = False
    step: float | int | None = None
    choices: tuple[Scalar, ...] = ()
    also: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    when: Mapping[str, tuple[Scalar, ...]] = field(default_factory=dict)

    def active(self, values: Mapping[str, Any]) -> bool:
        """Whether this parameter exists in a trial whose earlier parameters took `values`."""
        return all(name in values and values[name] in accepted for name, accepted in self.when.items())

    def settings(self, value: Any) -> list[tuple[str, Any]]:
        """The (config key, value) pairs that `value` of this parameter sets."""
        out = [] if self.key is None else [(self.key, value)]
        if self.also:
            i = self.choices.index(value)
            out += [(key, values[i]) for key, values in self.also.items()]
        return out

    def extremes(self) -> list[Any]:
        """The values the check of a space tries: both ends of a range, every choice."""
        if self.type == "categorical":
            return list(self.choices)
        return [self.low, self.high]

    def describe(self) -> str:
        if self.type == "categorical":
            text = "{" + ", ".join(map(_show, self.choices)) + "}"
        else:
            text = f"[{_show(self.low)}, {_show(self.high)}]" + (" log" if self.log else "")
            text += f" step {_show(self.step)}" if self.step is not None else ""
        cond = ", ".join(f"{k}={'|'.join(map(_show, v))}" for k, v in self.when.items())
        keys = " + ".join(([self.key] if self.key else []) + list(self.also)) or "(switch)"
        return f"{self.name} -> {keys} {text}" + (f" when {cond}" if cond else "")


@dataclass(frozen=True)
class Space:
    """A parsed search-space file."""

    path: Path
    params: tuple[Param, ...]
    preset: str | None = None
    mixer: str | None = None
    fixed: Mapping[str, Any] = field(default_factory=dict)
    sha: str = ""

    @property
    def name(self) -> str:
        return self.path.stem

    def param(self, name: str) -> Param:
        return next(p for p in self.params if p.name == name)

    def keys(self) -> set[str]:
        """Every configuration key a parameter may set."""
        return {key for p in self.params for key in ([p.key] if p.key else []) + list(p.also)}

    def settings(self, values: Mapping[str, Any]) -> list[tuple[str, Any]]:
        """The (config key, value) pairs of a trial whose active parameters took `values`."""
        return [pair for p in self.params if p.name in values for pair in p.settings(values[p.name])]

    def active_values(self, pick: Any) -> dict[str, Any]:
        """Draw the parameters in order: `pick(param)` gives the value of each active one."""
        values: dict[str, Any] = {}
        for p in self.params:
            if p.active(values):
                values[p.name] = pick(p)
        return values


def suggest(trial: Any, space: Space) -> dict[str, Any]:
    """Draw the active parameters of `space` through an Optuna trial; returns name -> value."""

    def pick(p: Param) -> Any:
        if p.type == "categorical":
            return trial.suggest_categorical(p.name, list(p.choices))
        if p.type == "int":
            return trial.suggest_int(p.name, p.low, p.high, step=p.step or 1, log=p.log)
        return trial.suggest_float(p.name, p.low, p.high, step=p.step, log=p.log)

    return space.active_values(pick)


def grid_of(space: Space) -> dict[str, list[Any]]:
    """Every value of every parameter, for the grid and brute-force samplers; SpaceError where a
    parameter is a continuous range (a float without `step`)."""
    grid = {}
    for p in space.params:
        if p.type == "categorical":
            grid[p.name] = list(p.choices)
        elif p.type == "float" and p.step is None:
            raise SpaceError(f"{space.path}: parameter {p.name}: a grid needs discrete values; "
                             f"give it a step or make it categorical")
        elif p.log and p.type == "int":
            grid[p.name] = list(range(p.low, p.high + 1))
        else:
            n = int(round((p.high - p.low) / p.step))
            grid[p.name] = [p.low + i * p.step for i in range(n + 1)]
    return grid


def load_space(path: str | Path) -> Space:
    """Read and check the structure of a space file; SpaceError on any mistake."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise SpaceError(f"{path}: cannot read the space file: {err.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise SpaceError(f"{path}: not valid YAML: {yaml_problem(err)}") from None
    if not isinstance(data, dict):
        raise SpaceError(f"{path}: a space file holds a mapping with keys {', '.join(TOP_FIELDS)}")
    unknown = [k for k in data if k not in TOP_FIELDS]
    if unknown:
        raise SpaceError(f"{path}: unknown key {unknown[0]!r}; accepted: {', '.join(TOP_FIELDS)}")
    for name in ("preset", "mixer"):
        if data.get(name) is not None and not isinstance(data[name], str):
            raise SpaceError(f"{path}: {name} must be a name, got {data[name]!r}")
    fixed = data.get("fixed") or {}
    if not isinstance(fixed, dict) or not all(isinstance(k, str) for k in fixed):
        raise SpaceError(f"{path}: fixed must map config keys (e.g. optim.warmup_steps) to values")
    raw = data.get("params")
    if not isinstance(raw, dict) or not raw:
        raise SpaceError(f"{path}: params must map parameter names to their definitions (at least one)")
    params: list[Param] = []
    for name, spec in raw.items():
        params.append(_param(path, str(name), spec, params))
    _check_switches(path, params)
    _check_keys(path, params)
    sha = hashlib.sha256(text.encode()).hexdigest()[:12]
    return Space(path, tuple(params), data.get("preset"), data.get("mixer"), dict(fixed), sha)


def _param(path: Path, name: str, spec: Any, earlier: Sequence[Param]) -> Param:
    def bad(problem: str) -> SpaceError:
        return SpaceError(f"{path}: parameter {name}: {problem}")

    if not isinstance(spec, dict):
        raise bad("its definition must be a mapping with at least `type`")
    kind = spec.get("type")
    if kind not in TYPES:
        raise bad(f"type {kind!r} is not accepted; accepted: {', '.join(TYPES)}")
    unknown = [k for k in spec if k not in FIELDS[kind]]
    if unknown:
        raise bad(f"unknown field {unknown[0]!r} for type {kind}; accepted: {', '.join(FIELDS[kind])}")
    key = spec.get("key")
    if key is not None and (not isinstance(key, str) or not key.strip()):
        raise bad(f"key must be a config key such as optim.lr, got {key!r}")
    when = _when(spec.get("when"), earlier, bad)
    if kind == "categorical":
        choices = spec.get("choices")
        if not isinstance(choices, list) or not choices:
            raise bad("choices must be a non-empty list")
        for c in choices:
            if not (c is None or isinstance(c, (str, int, float, bool))):
                raise bad(f"choice {c!r} is not a scalar (accepted: strings, numbers, booleans, null)")
        if len(set(map(repr, choices))) != len(choices):
            raise bad("choices must be distinct")
        also = spec.get("also") or {}
        if not isinstance(also, dict):
            raise bad("also must map config keys to one value per choice")
        for k, values in also.items():
            if not isinstance(values, list) or len(values) != len(choices):
                raise bad(f"also.{k} must list one value per choice ({len(choices)}), got {values!r}")
        return Param(name, kind, key, choices=tuple(choices),
                     also={str(k): tuple(v) for k, v in also.items()}, when=when)
    number = int if kind == "int" else float
    low, high = (_number(spec.get(end), number, end, bad) for end in ("low", "high"))
    if not low < high:
        raise bad(f"low must be < high, got low={low} high={high}")
    log = spec.get("log", False)
    if not isinstance(log, bool):
        raise bad(f"log must be true or false, got {log!r}")
    if log and low <= 0:
        raise bad(f"a log scale needs low > 0, got low={low} (for 0, add a categorical switch)")
    step = spec.get("step")
    if step is not None:
        step = _number(step, number, "step", bad)
        if step <= 0:
            raise bad(f"step must be > 0, got {step}")
        if log:
            raise bad("step and log cannot be combined (Optuna draws log ranges continuously)")
        n = (high - low) / step
        if abs(n - round(n)) > 1e-9 * max(1.0, n):
            raise bad(f"high - low = {high - low} is not a multiple of step {step}")
    return Param(name, kind, key, low, high, log, step, when=when)


def _number(value: Any, number: type, what: str, bad: Any) -> float | int:
    if isinstance(value, str):
        # YAML 1.1 reads 1e-4 (no dot) as a string; accept it as the number it plainly is.
        try:
            value = float(value)
        except ValueError:
            pass
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise bad(f"{what} must be a number, got {value!r}")
    if number is int:
        if float(value) != int(value):
            raise bad(f"{what} must be an integer for type int, got {value!r}")
        return int(value)
    if not math.isfinite(value):
        raise bad(f"{what} must be finite, got {value!r}")
    return float(value)


def _when(raw: Any, earlier: Sequence[Param], bad: Any) -> dict[str, tuple[Scalar, ...]]:
    if raw is None:
        return {}
    if not isinstance(raw, dict) or not raw:
        raise bad("when must map earlier categorical parameters to a value or a list of values")
    names = {p.name: p for p in earlier}
    out = {}
    for other, accepted in raw.items():
        if other not in names:
            raise bad(f"when names {other!r}, which is not a parameter declared before it; "
                      f"accepted: {', '.join(names) or 'none'}")
        if names[other].type != "categorical":
            raise bad(f"when names {other!r}, a {names[other].type} range; conditions need a categorical parameter")
        accepted = tuple(accepted) if isinstance(accepted, list) else (accepted,)
        for value in accepted:
            if value not in names[other].choices:
                raise bad(f"when {other}={value!r} can never hold; {other} takes "
                          f"{', '.join(map(_show, names[other].choices))}")
        out[str(other)] = accepted
    return out


def _check_switches(path: Path, params: Sequence[Param]) -> None:
    used = {name for p in params for name in p.when}
    for p in params:
        if p.key is None and not p.also and (p.type != "categorical" or p.name not in used):
            raise SpaceError(f"{path}: parameter {p.name}: it has no key and no parameter depends on it; "
                             f"give it a key (the config key it sets, e.g. optim.lr)")


def _check_keys(path: Path, params: Sequence[Param]) -> None:
    seen: dict[str, str] = {}
    for p in params:
        for key in ([p.key] if p.key else []) + list(p.also):
            if key in seen:
                raise SpaceError(f"{path}: parameter {p.name}: key {key} is already set by parameter {seen[key]}")
            seen[key] = p.name


def _show(value: Any) -> str:
    return "null" if value is None else f"{value:g}" if isinstance(value, float) else str(value)
