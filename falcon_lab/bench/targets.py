"""The kernels' targets: each ratio of ``lab bench kernels``' rows that the lab holds its kernels to, at every shape,
met or missed, beside an earlier run's.

A target divides one row's time by another's at the same shape (a rule by fla's kernel for the same recurrence, or
a rule by the simpler rule it extends) and bounds the quotient. Where a rule has several forms (falcon-2's solves)
the fastest form measured stands for it and is named. ``targets.md`` and ``targets.csv`` are written beside
``kernels.csv`` by every ``lab bench kernels`` run, and ``lab bench targets`` remakes them from any kernels.csv,
with ``--against`` an earlier one, so a record's table is one command's output.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from falcon_lab.runs import atomic_write_text


@dataclass(frozen=True)
class Target:
    """``ops`` (the fastest of them) in ``mode`` over ``under`` in ``under_mode``, at most ``bound``."""

    label: str
    ops: tuple[str, ...]
    mode: str
    under: str
    under_mode: str
    bound: float


TARGETS: tuple[Target, ...] = (
    Target("falcon-1 (λ = 0) fwd+bwd / fla chunk_delta_rule", ("falcon-1 λ=0",), "fwd+bwd",
           "fla chunk_delta_rule", "fwd+bwd", 0.8),
    Target("falcon-1 (λ > 0) fwd / fla chunk_gated_delta_rule", ("falcon-1 λ>0",), "fwd",
           "fla chunk_gated_delta_rule", "fwd", 0.8),
    Target("falcon-1a fwd / fla chunk_simple_gla", ("falcon-1a",), "fwd", "fla chunk_simple_gla", "fwd", 0.8),
    Target("falcon-2 fwd+bwd / falcon-1 (λ > 0)", ("falcon-2", "falcon-2 inverses", "falcon-2 outputs apart"),
           "fwd+bwd", "falcon-1 λ>0", "fwd+bwd", 2.5),
    Target("falcon-2a fwd+bwd / falcon-1a", ("falcon-2a",), "fwd+bwd", "falcon-1a", "fwd+bwd", 1.5),
    Target("falcon-3 (B = 4) fwd+bwd / falcon-1 (λ > 0)", ("falcon-3",), "fwd+bwd", "falcon-1 λ>0", "fwd+bwd", 3.0),
    Target("falcon-3a (B = 4) fwd+bwd / falcon-1a", ("falcon-3a",), "fwd+bwd", "falcon-1a", "fwd+bwd", 1.5),
)

COLUMNS = ["target", "bound", "shape", "form", "ms", "under_ms", "ratio", "met", "before_ratio"]


class TargetsError(ValueError):
    """A kernels.csv that cannot be read as one."""


def read_times(path: Path) -> dict[tuple[str, str, str], float]:
    """``(shape, op, mode) -> ms`` of the rows of a kernels.csv that measured a time."""
    try:
        with Path(path).open(encoding="utf-8", newline="") as f:
            reader = csv.DictReader(f)
            rows = list(reader)
            fields = set(reader.fieldnames or ())
    except (OSError, UnicodeDecodeError, csv.Error) as err:
        raise TargetsError(f"cannot read {path}: {err}") from None
    if not {"shape", "op", "mode", "ms"} <= fields:
        raise TargetsError(f"{path} is not a kernels.csv of lab bench kernels (no shape, op, mode and ms columns)")
    times = {}
    for r in rows:
        try:
            ms = float(r["ms"]) if r["ms"] else None
        except ValueError:
            raise TargetsError(f"{path}: ms {r['ms']!r} of {r['op']} at {r['shape']} is not a number") from None
        if ms is not None and ms > 0:
            times[r["shape"], r["op"], r["mode"]] = ms
    return times


def _quotient(t: Target, shape: str, times: dict[tuple[str, str, str], float]) -> tuple[str, float, float] | None:
    """(the fastest form, its ms, the divisor's ms) at ``shape``; None where either side was not measured."""
    under = times.get((shape, t.under, t.under_mode))
    forms = [(times[shape, op, t.mode], op) for op in t.ops if (shape, op, t.mode) in times]
    if under is None or not forms:
        return None
    ms, op = min(forms)
    return op, ms, under


def _shapes(times: dict[tuple[str, str, str], float]) -> list[str]:
    return list(dict.fromkeys(shape for shape, _, _ in times))


def evaluate(times: dict[tuple[str, str, str], float],
             before: dict[tuple[str, str, str], float] | None = None) -> list[dict]:
    """One row per target and shape of ``times`` (a target neither side of which was measured there: no row)."""
    rows = []
    for t in TARGETS:
        for shape in _shapes(times):
            now = _quotient(t, shape, times)
            then = _quotient(t, shape, before) if before else None
            if now is None and then is None:
                continue
            row = {"target": t.label, "bound": t.bound, "shape": shape, "form": "", "ms": None, "under_ms": None,
                   "ratio": None, "met": "", "before_ratio": then[1] / then[2] if then else None}
            if now is not None:
                form, ms, under = now
                row.update(form=form, ms=ms, under_ms=under, ratio=ms / under, met=ms / under <= t.bound)
            rows.append(row)
    return rows


def _num(v: float | None, digits: int = 3) -> str:
    return "" if v is None else f"{v:.{digits}g}"


def write(rows: Sequence[dict], out: Path, source: str, against: str | None = None) -> tuple[Path, Path]:
    """``targets.csv`` (every field) and ``targets.md`` (a table a shape to a column) under ``out``."""
    from falcon_lab.bench.train import _write_csv

    out.mkdir(parents=True, exist_ok=True)
    _write_csv(out / "targets.csv", [{**r, **{k: _num(r[k], 6) for k in ("ms", "under_ms", "ratio", "before_ratio")}}
                                     for r in rows], COLUMNS)
    shapes = list(dict.fromkeys(r["shape"] for r in rows))
    head = ["target", "bound", *shapes]
    lines = ["# Kernel targets", "", f"- times: `{source}`" + (f"; before: `{against}`" if against else ""),
             "- each cell: the ratio now (✓ met, ✗ missed; the two times in ms)"
             + ("; ← the ratio before" if against else ""), "",
             "| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for t in TARGETS:
        cells = []
        for shape in shapes:
            r = next((r for r in rows if r["target"] == t.label and r["shape"] == shape), None)
            if r is None:
                cells.append("")
                continue
            now = ("not measured" if r["ratio"] is None else
                   f"{'**' if r['met'] else ''}{_num(r['ratio'])}{'**' if r['met'] else ''} "
                   f"{'✓' if r['met'] else '✗'} ({_num(r['ms'])} / {_num(r['under_ms'])}"
                   + (f", {r['form']}" if len(t.ops) > 1 else "") + ")")
            cells.append(now + (f" ← {_num(r['before_ratio'])}" if r["before_ratio"] is not None else ""))
        if any(cells):
            lines.append("| " + " | ".join([t.label, f"≤ {t.bound:g}", *cells]) + " |")
    atomic_write_text(out / "targets.md", "\n".join(lines) + "\n")
    return out / "targets.csv", out / "targets.md"


def times_of(rows: Sequence[dict]) -> dict[tuple[str, str, str], float]:
    """``(shape, op, mode) -> ms`` of ``lab bench kernels``' rows in memory (those that measured a time)."""
    return {(r["shape"], r["op"], r["mode"]): r["ms"] for r in rows if r.get("ms")}


def read_all(paths: Sequence[Path]) -> dict[tuple[str, str, str], float]:
    """The times of several kernels.csv files (a later file's row replaces an earlier one's)."""
    times: dict[tuple[str, str, str], float] = {}
    for path in paths:
        times.update(read_times(path))
    return times


def remake(kernels_csv: Sequence[Path], out: Path, against: Sequence[Path] = ()) -> list[dict]:
    """Read the kernels.csv files ``kernels_csv`` (and ``against``, an earlier run's), write the targets under
    ``out``; the rows written. TargetsError for a file that cannot be read as a kernels.csv."""
    rows = evaluate(read_all(kernels_csv), read_all(against) if against else None)
    write(rows, out, " ".join(map(str, kernels_csv)), " ".join(map(str, against)) if against else None)
    return rows
