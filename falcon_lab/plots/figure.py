"""Figures on matplotlib's Agg canvas (no display, no pyplot state) in seaborn's style, saved atomically."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from pathlib import Path

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from falcon_lab.runs import atomic_write


@contextlib.contextmanager
def styled() -> Iterator[None]:
    """Seaborn's white-grid style for the axes made inside the block."""
    import seaborn as sns

    with sns.axes_style("whitegrid"), sns.plotting_context("notebook", font_scale=0.9):
        yield


def new_figure(width: float, height: float) -> Figure:
    """A figure drawn by the Agg canvas."""
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def shown(path: Path) -> str:
    """A path as figures name it: from the repository root when it lies in the checkout (records/addition/…),
    else as given."""
    from falcon_lab.paths import REPO_ROOT

    try:
        return Path(path).resolve().relative_to(REPO_ROOT.resolve()).as_posix()
    except ValueError:
        return Path(path).as_posix()


def save_png(fig: Figure, path: Path, source: str, command: str) -> Path:
    """Write `fig` to `path` as a PNG (via a temporary file), recording in the PNG's text fields the
    table it was drawn from and the command that draws it again."""
    metadata = {"Source": source, "Description": f"Remade by `{command}` from the repository root."}
    atomic_write(path, lambda f: fig.savefig(f, format="png", dpi=120, metadata=metadata))
    return path
