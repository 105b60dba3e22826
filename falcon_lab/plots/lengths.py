"""per_length.png of `lab reproduce mqar|parity|permutation`: accuracy against sequence length, one line per
row (mixer) at each run's best step, the mean over seeds with a ± one standard deviation band, as
`lab plot addition` draws widths; the train lengths shaded, the held-out ones marked."""

from __future__ import annotations

from pathlib import Path

from falcon_lab.plots.addition import PANELS, draw_curves, has_values, palette, seed_count
from falcon_lab.plots.figure import new_figure, save_png, shown, styled
from falcon_lab.plots.tables import read_table


def plot_lengths(source: Path, path: Path, task: str, train: tuple[int, int], test: tuple[int, int],
                 command: str) -> Path:
    """Draw `path` from the per-length CSV `source` (row, seed, length, teacher_forced, per_token)."""
    frame = read_table(source, numbers=("seed", "length", "teacher_forced"), texts=("row",), optional=("per_token",),
                       made_by=f"lab reproduce {task}")
    panels = [(c, t.replace("answer", "sequence")) for c, t in PANELS if has_values(frame, c)]
    colors = palette(list(dict.fromkeys(frame["row"])))
    seeds = frame.groupby("row")["seed"].nunique()
    with styled():
        fig = new_figure(6.5 * len(panels) + 2.5, 5)
        axes = fig.subplots(1, len(panels), squeeze=False)[0]
        for ax, (column, title) in zip(axes, panels):
            ax.axvspan(train[0] - 0.5, train[1] + 0.5, color="tab:green", alpha=0.08, lw=0,
                       label=f"trained lengths {train[0]}–{train[1]}")
            ax.axvspan(test[0] - 0.5, test[1] + 0.5, color="tab:red", alpha=0.06, lw=0,
                       label=f"held out {test[0]}–{test[1]}")
            draw_curves(ax, frame, column, "row", colors, x="length")
            ax.set_xlim(train[0] - 0.5, test[1] + 0.5)
            ax.set_ylim(-3, 103)
            ax.set_xlabel("sequence length (tokens)")
            ax.set_ylabel("accuracy (%)")
            ax.set_title(title)
        handles, labels = axes[0].get_legend_handles_labels()
        fig.legend(handles, labels, loc="outside right upper", fontsize="small")
        fig.suptitle(f"{task} at each run's best step: {len(seeds)} rows, {seed_count(seeds)} each "
                     f"({shown(source)})", fontsize="medium")
    return save_png(fig, path, shown(source), command)
