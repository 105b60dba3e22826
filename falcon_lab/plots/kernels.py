"""kernels.png from `lab bench kernels`' kernels.csv: the time of each op beside fla's, one panel per shape and
mode (forward, forward + backward), bars on a log axis; ours coloured, fla's and SDPA's grey; an op that did
not run (refused, skipped) named with its status instead of a bar."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from falcon_lab.plots.figure import new_figure, save_png, shown, styled
from falcon_lab.plots.grid import DISTINCT
from falcon_lab.plots.tables import read_table

MADE_BY = "lab bench kernels"
# Ops that are not ours: drawn grey, the anchors ours are read against.
ANCHORS = ("fla ", "torch ")


def read_kernels(path: Path) -> pd.DataFrame:
    """kernels.csv; ValueError naming the file and the column when it is malformed."""
    return read_table(path, numbers=(), texts=("shape", "op", "mode", "status"), optional=("ms",), made_by=MADE_BY)


def plot_kernels(csv: Path, path: Path, command: str) -> Path:
    """Draw `path` from kernels.csv at `csv`."""
    frame = read_kernels(csv)
    if "ms" not in frame.columns:
        raise ValueError(f"{csv}: missing column 'ms'")
    shapes = list(dict.fromkeys(frame["shape"]))
    modes = list(dict.fromkeys(frame["mode"]))
    ops = list(dict.fromkeys(frame["op"]))
    ours = [op for op in ops if not op.startswith(ANCHORS)]
    colors = {op: DISTINCT[i % len(DISTINCT)] if op in ours else "0.55" for i, op in enumerate(ours)}
    colors.update({op: "0.55" for op in ops if op not in colors})
    with styled():
        fig = new_figure(4.6 * len(modes) + 0.5, 0.28 * len(ops) * len(shapes) + 1.4 * len(shapes) + 0.6)
        axes = fig.subplots(len(shapes), len(modes), squeeze=False, sharey=True)
        low, top = float(frame["ms"].min()) / 4, float(frame["ms"].max()) * 4
        for r, shape in enumerate(shapes):
            for c, mode in enumerate(modes):
                ax = axes[r, c]
                mine = frame[(frame["shape"] == shape) & (frame["mode"] == mode)].set_index("op").reindex(ops)
                y = np.arange(len(ops))
                ms = mine["ms"].to_numpy(dtype=float)
                ax.barh(y, np.nan_to_num(ms, nan=0.0), color=[colors[o] for o in ops], height=0.7)
                for i, (value, status) in enumerate(zip(ms, mine["status"].fillna(""))):
                    text = f"{value:.3g} ms" if np.isfinite(value) else (status.split(":")[0] or "not run")
                    ax.text(value * 1.08 if np.isfinite(value) else low * 1.2, i, text, va="center", fontsize="x-small",
                            color="0.1" if np.isfinite(value) else "0.4")
                ax.set_xscale("log")
                ax.set_xlim(low, top)
                ax.set_yticks(y, ops)
                ax.set_title(f"{shape} (B×T×H×D), {mode}", fontsize="small")
                ax.set_xlabel("time (ms, log scale)" if r == len(shapes) - 1 else "")
        axes[0, 0].invert_yaxis()  # the axes share y: the first op on top in every panel
        fig.suptitle(f"Kernel times beside fla and SDPA (ours coloured, theirs grey)\n({shown(csv)})",
                     fontsize="medium")
    return save_png(fig, path, shown(csv), command)
