"""Choosing a campaign's rows and preset by name, with errors that list what is accepted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar


class Named(Protocol):
    name: str


R = TypeVar("R", bound=Named)
V = TypeVar("V")


def pick_rows(text: str | None, rows: Sequence[R]) -> list[R]:
    """The rows named in a comma-separated list, in its order, each once (all rows for None); ValueError
    naming the accepted ones."""
    if text is None:
        return list(rows)
    by_name = {r.name: r for r in rows}
    accepted = ", ".join(by_name)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError(f"--rows is empty; accepted: {accepted}")
    for name in names:
        if name not in by_name:
            raise ValueError(f"unknown row {name!r}; accepted: {accepted}")
    return [by_name[n] for n in dict.fromkeys(names)]


def pick_preset(preset: str, presets: Mapping[str, V]) -> V:
    """What `presets` holds for `preset`; ValueError naming the accepted ones."""
    if preset not in presets:
        raise ValueError(f"unknown preset {preset!r}; accepted: {', '.join(presets)}")
    return presets[preset]
