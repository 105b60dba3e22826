"""Typed dataclass trees from plain mappings: merging layers, dotted `key=value` overrides, and values
coerced to their declared types, with one-line errors that name the key and what it accepts."""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Mapping
from typing import Any

import yaml


class ConfigError(ValueError):
    """A configuration mistake; its message is one line that says what is accepted."""


def merge(base: dict[str, Any], top: Mapping[str, Any]) -> dict[str, Any]:
    """Recursive dict merge: `top` wins; nested mappings merge key by key."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = merge(out[key], value)
        else:
            out[key] = value
    return out


def set_dotted(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Set `data[a][b][c] = value` for dotted key 'a.b.c', creating sections on the way."""
    *parents, last = dotted.split(".")
    node = data
    for part in parents:
        child = node.get(part)
        if not isinstance(child, dict):
            child = node[part] = {}
        node = child
    node[last] = value


def yaml_problem(err: yaml.YAMLError) -> str:
    """What is wrong in a YAML text, with the line and column (from 1) where the parser found it."""
    mark = getattr(err, "problem_mark", None) or getattr(err, "context_mark", None)
    problem = getattr(err, "problem", None) or str(err).splitlines()[0]
    context = getattr(err, "context", None)
    what = f"{problem} ({context})" if context else problem
    return f"line {mark.line + 1}, column {mark.column + 1}: {what}" if mark is not None else what


def check_value(value: Any, hint: Any, key: str) -> None:
    """ConfigError naming `key`, its type and `value` when `value` is not of type `hint` (as a `--set` value,
    checked where it is given: a later layer setting the same key must not hide it)."""
    if not dataclasses.is_dataclass(hint):
        _coerce(value, hint, key)


def hint_of(root: type, dotted: str) -> Any:
    """The declared type of dotted key in dataclass `root`, or Any inside free-form mappings; ConfigError
    if unknown."""
    cls: Any = root
    parts = dotted.split(".")
    for i, part in enumerate(parts):
        if not dataclasses.is_dataclass(cls):
            return Any  # below a dict field such as model.mixer_options
        hints = typing.get_type_hints(cls)
        if part not in hints:
            where = ".".join(parts[:i]) or "the top level"
            raise ConfigError(f"unknown key {dotted!r}; accepted keys in {where}: {', '.join(hints)}")
        cls = hints[part]
        if typing.get_origin(cls) is dict and i < len(parts) - 1:
            return Any
    return cls


def build(cls: type, data: Any, prefix: str) -> Any:
    """Instantiate dataclass `cls` from mapping `data`, coercing each value to its declared type."""
    where = prefix.rstrip(".") or "the top level"
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where} must be a mapping, got {data!r}")
    hints = typing.get_type_hints(cls)
    unknown = [k for k in data if k not in hints]
    if unknown:
        raise ConfigError(f"unknown key {prefix + str(unknown[0])!r}; accepted keys in {where}: {', '.join(hints)}")
    kwargs = {}
    for key, value in data.items():
        hint = hints[key]
        if dataclasses.is_dataclass(hint):
            kwargs[key] = build(hint, value, f"{prefix}{key}.")
        else:
            kwargs[key] = _coerce(value, hint, prefix + key)
    return cls(**kwargs)


def _type_name(hint: Any) -> str:
    if hint is type(None):
        return "null"
    if isinstance(hint, type) and not typing.get_args(hint):
        return hint.__name__
    return str(hint).replace("typing.", "")


def _coerce(value: Any, hint: Any, key: str) -> Any:
    """`value` as type `hint`, or ConfigError naming the key, the expected type and the value."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    bad = ConfigError(f"{key} expects {_type_name(hint)}, got {value!r}")
    if hint is Any:
        return value
    if origin in (typing.Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        (inner,) = [a for a in args if a is not type(None)]
        return _coerce(value, inner, key)
    if value is None:
        raise bad
    if origin is tuple:
        if isinstance(value, str):
            value = [v.strip() for v in value.strip("()[] ").split(",")]
        if not isinstance(value, (list, tuple)) or len(value) != len(args):
            raise bad
        return tuple(_coerce(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args)))
    if origin is dict:
        if not isinstance(value, Mapping):
            raise bad
        return dict(value)
    if hint is bool:
        if isinstance(value, bool):
            return value
        raise bad
    if hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                raise bad from None
        raise bad
    if hint is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            # YAML 1.1 reads 3e-3 (no dot) as a string; accept it as the number it plainly is.
            try:
                return float(value)
            except ValueError:
                raise bad from None
        raise bad
    if hint is str:
        if isinstance(value, str):
            return value
        raise bad
    raise bad


def parse_text(text: str, hint: Any) -> Any:
    """Parse the right-hand side of a `--set` override, guided by the key's declared type."""
    if text.lower() in ("null", "none", "~"):
        return None
    if hint is str:
        return text
    if hint is bool:
        lowered = text.lower()
        if lowered in ("true", "yes", "on", "1"):
            return True
        if lowered in ("false", "no", "off", "0"):
            return False
        return text  # _coerce names the key and the accepted type
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return text
    if isinstance(value, str):
        try:
            return float(value) if any(c in value for c in ".eE") else int(value)
        except ValueError:
            return value
    return value
