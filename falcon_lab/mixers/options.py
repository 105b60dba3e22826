"""Typed mixer options: every mixer declares a dataclass; unknown names and bad values raise one-line errors."""

from __future__ import annotations

import dataclasses
from typing import Any, TypeVar

from falcon_lab.kernels.common.checks import check_sequence_options

T = TypeVar("T")


def parse_options(mixer: str, cls: type[T], options: dict[str, Any]) -> T:
    """Build the options dataclass ``cls`` of ``mixer`` from keyword options.

    Raises ValueError naming the unknown option(s) and listing the accepted ones.
    """
    accepted = [f.name for f in dataclasses.fields(cls)]
    unknown = sorted(set(options) - set(accepted))
    if unknown:
        raise ValueError(f"unknown option(s) {', '.join(map(repr, unknown))} for mixer {mixer!r}; "
                         f"accepted: {', '.join(accepted)}")
    opts = cls(**options)
    check = getattr(opts, "check", None)
    if check is not None:
        check(mixer)
    return opts


def check_choice(mixer: str, name: str, value: object, accepted: tuple[str, ...]) -> None:
    """``value`` must be one of ``accepted``."""
    if value not in accepted:
        raise ValueError(f"mixer {mixer!r}: {name}={value!r}; accepted: {', '.join(accepted)}")


def check_kernel_choices(mixer: str, alignment: str, timing: str, backend: str, backends: tuple[str, ...]) -> None:
    """A recurrent mixer's write pairing, read timing and backend must be ones its kernels take (the ops' own
    check, its error naming the mixer)."""
    try:
        check_sequence_options(alignment=alignment, timing=timing, backend=backend, backends=backends)
    except ValueError as err:
        raise ValueError(f"mixer {mixer!r}: {err}") from None


def check_int(mixer: str, name: str, value: object, minimum: int) -> None:
    """``value`` must be an integer >= ``minimum`` (booleans are not integers here)."""
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"mixer {mixer!r}: {name} must be an integer >= {minimum}, got {value!r}")


def check_bool(mixer: str, name: str, value: object) -> None:
    if not isinstance(value, bool):
        raise ValueError(f"mixer {mixer!r}: {name} must be True or False, got {value!r}")


def check_range(mixer: str, name: str, value: object, low: float, high: float, *,
                low_open: bool = False, high_open: bool = False) -> None:
    """``value`` must be a real number in the interval (or half-open interval) [low, high]."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if ok:
        ok = (value > low if low_open else value >= low) and (value < high if high_open else value <= high)
    if not ok:
        interval = f"{'(' if low_open else '['}{low}, {high}{')' if high_open else ']'}"
        raise ValueError(f"mixer {mixer!r}: {name} must be a real number in {interval}, got {value!r}")


def head_dim_of(mixer: str, d_model: int, n_heads: int, head_dim: int | None) -> int:
    """The per-head width: ``head_dim`` when given, else ``d_model / n_heads`` (which must divide)."""
    check_int(mixer, "d_model", d_model, 1)
    check_int(mixer, "n_heads", n_heads, 1)
    if head_dim is not None:
        check_int(mixer, "head_dim", head_dim, 1)
        return head_dim
    if d_model % n_heads:
        raise ValueError(f"mixer {mixer!r}: d_model={d_model} is not divisible by n_heads={n_heads}; "
                         f"choose n_heads dividing d_model or pass head_dim")
    return d_model // n_heads
