"""A sweep's parameters against its objective, from its trials table (`trials.csv`, optuna's
`trials_dataframe()`: `number`, `value`, `state`, `params_<name>`): slice.png, one panel per parameter, and
contour.png, one panel per pair of the most important parameters. Categorical parameters get their values
as ticks (jittered points), numbers spanning more than a factor 10 a log axis; every panel has the complete
trials' points, and a pair of two numeric parameters with enough distinct points gets the objective's filled
contour beneath."""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.axes import Axes
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from matplotlib.tri import Triangulation

from falcon_lab.plots.figure import new_figure, save_png, styled
from falcon_lab.plots.grid import outer_labels, panels

CMAP = "viridis"


def complete_trials(trials: pd.DataFrame) -> pd.DataFrame:
    """The complete trials (a state COMPLETE and a value) of a trials table."""
    done = trials[trials["state"].astype(str).str.upper().str.endswith("COMPLETE")] if "state" in trials else trials
    return done.dropna(subset=["value"])


def parameter_names(trials: pd.DataFrame) -> list[str]:
    """The parameters with a value in at least one complete trial, in the table's order."""
    return [c[len("params_"):] for c in trials.columns if c.startswith("params_") and trials[c].notna().any()]


def axis_values(ax: Axes, values: pd.Series, axis: str, jitter: bool = True) -> np.ndarray:
    """Positions for `values` on `ax`'s `axis` ("x" or "y"): numbers as they are (a log axis when they are
    positive and span more than a factor 10), categories at 0, 1, … with their names as ticks."""
    numbers = pd.to_numeric(values, errors="coerce")
    if numbers.notna().all() and values.map(lambda v: not isinstance(v, bool)).all():
        if (numbers > 0).all() and numbers.max() / numbers.min() > 10:
            (ax.set_xscale if axis == "x" else ax.set_yscale)("log")
            # ticks at 1, 2 and 5 of each decade, as plain numbers; no minor labels, which run into each other
            which = ax.xaxis if axis == "x" else ax.yaxis
            which.set_major_locator(LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
            which.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
            which.set_minor_formatter(NullFormatter())
            if axis == "x":
                ax.tick_params(axis="x", labelrotation=30)
        return numbers.to_numpy(dtype=float)
    categories = sorted(values.astype(str).unique())
    codes = values.astype(str).map({c: i for i, c in enumerate(categories)}).to_numpy(dtype=float)
    if axis == "x":
        ax.set_xticks(range(len(categories)), categories, rotation=30, ha="right")
        ax.set_xlim(-0.5, len(categories) - 0.5)
    else:
        ax.set_yticks(range(len(categories)), categories)
        ax.set_ylim(-0.5, len(categories) - 0.5)
    if jitter:  # trials of one category apart, the same way every time
        codes = codes + np.random.default_rng(0).uniform(-0.15, 0.15, len(codes))
    return codes


def plot_slice(trials: pd.DataFrame, path: Path, objective: str, source: str, command: str) -> Path:
    """slice.png: the objective of every complete trial against each parameter it has, coloured by trial
    number (which the sampler drew later)."""
    done = complete_trials(trials)
    names = parameter_names(done)
    if done.empty or not names:
        raise ValueError("no complete trial with parameters")
    with styled():
        fig = new_figure(8, 5)
        axes = panels(fig, len(names), width=3.0, height=2.6, sharex=False)
        for ax, name in zip(axes, names):
            mine = done.dropna(subset=[f"params_{name}"])
            x = axis_values(ax, mine[f"params_{name}"], "x")
            points = ax.scatter(x, mine["value"], c=mine["number"], cmap=CMAP, vmin=done["number"].min(),
                                vmax=done["number"].max(), s=28, edgecolors="0.2", linewidths=0.4)
            ax.set_title(f"{name} ({len(mine)} trials)", fontsize="small")
            ax.tick_params(labelbottom=True)
        outer_labels(axes, "", objective)
        fig.colorbar(points, ax=axes, shrink=0.6, label="trial number")
        fig.suptitle(f"{objective} of each complete trial against each parameter\n({source})", fontsize="medium")
    return save_png(fig, path, source, command)


def plot_pairs(trials: pd.DataFrame, params: Sequence[str], path: Path, objective: str, source: str,
               command: str) -> Path:
    """contour.png: one panel per pair of `params` (the most important first), the complete trials as points
    coloured by the objective, its filled contour beneath where both parameters are numbers with at least
    four distinct points not on one line."""
    done = complete_trials(trials)
    pairs = list(itertools.combinations(params, 2))
    if len(pairs) < 1:
        raise ValueError("needs two parameters present in complete trials")
    lo, hi = float(done["value"].min()), float(done["value"].max())
    with styled():
        fig = new_figure(8, 5)
        axes = panels(fig, len(pairs), width=3.6, height=3.2, columns=3, sharex=False, sharey=False)
        points = None
        for ax, (a, b) in zip(axes, pairs):
            mine = done.dropna(subset=[f"params_{a}", f"params_{b}"])
            if mine.empty:
                ax.text(0.5, 0.5, "no complete trial has both", transform=ax.transAxes, ha="center")
                continue
            x = axis_values(ax, mine[f"params_{a}"], "x")
            y = axis_values(ax, mine[f"params_{b}"], "y")
            _contour(ax, mine, a, b, lo, hi)
            points = ax.scatter(x, y, c=mine["value"], cmap=CMAP, vmin=lo, vmax=hi, s=40, edgecolors="white",
                                linewidths=0.8, zorder=3)
            ax.set_xlabel(a)
            ax.set_ylabel(b)
            ax.set_title(f"{b} against {a} ({len(mine)} trials)", fontsize="small")
            ax.tick_params(labelbottom=True, labelleft=True)
        if points is not None:
            fig.colorbar(points, ax=axes, shrink=0.7, label=objective)
        fig.suptitle(f"{objective} over pairs of the most important parameters\n({source})", fontsize="medium")
    return save_png(fig, path, source, command)


def _contour(ax: Axes, mine: pd.DataFrame, a: str, b: str, lo: float, hi: float) -> None:
    """The objective's filled contour (linear interpolation over the points' triangles, log axes in log
    space) when both parameters are numbers with four or more distinct points not on one line."""
    xs = pd.to_numeric(mine[f"params_{a}"], errors="coerce")
    ys = pd.to_numeric(mine[f"params_{b}"], errors="coerce")
    if xs.isna().any() or ys.isna().any():
        return
    distinct = pd.DataFrame({"x": xs, "y": ys, "v": mine["value"]}).groupby(["x", "y"], as_index=False)["v"].max()
    if len(distinct) < 4:
        return
    x, y = distinct["x"].to_numpy(float), distinct["y"].to_numpy(float)
    tx = np.log10(x) if ax.get_xscale() == "log" else x
    ty = np.log10(y) if ax.get_yscale() == "log" else y
    try:
        tri = Triangulation(tx, ty)
    except (ValueError, RuntimeError):  # points on one line: no triangles
        return
    if tri.triangles.size == 0:
        return
    tri = Triangulation(x, y, tri.triangles)
    ax.tricontourf(tri, distinct["v"].to_numpy(float), levels=np.linspace(lo, hi, 11) if hi > lo else 1,
                   cmap=CMAP, alpha=0.45, zorder=1)
