"""`lab plot`: figures from the tables `lab reproduce` and `lab ablate` write."""

from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer

from falcon_lab.cli._common import remake_command, writable_out

app = typer.Typer(help="Render figures (PNG) from the tables `lab reproduce` and `lab ablate` write.")

Out = Annotated[Path | None, typer.Option(help="Folder for the PNG files; default the table's folder.",
                                         callback=writable_out)]


def _draw(name: str, flag: str, source: Path | None, default: str | None, out: Path | None,
          train_widths: str | None, draw: Callable[[Path, Path | None, tuple[int, int] | None, str], list[Path]]
          ) -> None:
    """Run `draw(source, out, widths, command)` for `lab plot <name>` (`source` given by `flag`, else
    `<results>/<default>`) and print each figure; bad input is one line on stderr, exit code 2."""
    from falcon_lab.plots.addition import parse_widths
    from falcon_lab.paths import results_root

    folder = source if source is not None else results_root() / str(default)
    try:
        command = remake_command(["lab", "plot", name], [
            (flag, source), ("--out", out), ("--train-widths", train_widths)])
        files = draw(folder, out, None if train_widths is None else parse_widths(train_widths), command)
    except ValueError as err:
        typer.echo(f"lab plot: {err}", err=True)
        raise typer.Exit(code=2) from None
    for path in files:
        typer.echo(f"figure: {path}")


@app.command()
def addition(
    table: Annotated[Path | None, typer.Option(
        help="Folder holding per_width.csv (from `lab reproduce addition`); default <results>/addition.")] = None,
    out: Out = None,
    train_widths: Annotated[str | None, typer.Option(
        help="Operand widths the runs trained on, shaded as LO-HI; default: as per_width.csv marks them "
             "(1-32 in a file without its `trained` column).")] = None,
) -> None:
    """Accuracy against operand width (the widths evaluated), one line per row at its best step: per_width.png.

    Lines are means over seeds with a ± one standard deviation band when there are several; the trained
    widths are shaded and the held-out ones (the paper's 33-48) marked as extrapolation. A per-token panel
    joins when the CSV has it.
    Where the folder has progress.csv, progress.png follows every evaluation: widths answered and
    validation accuracy against the step, beside the widest training width; where progress.csv holds each
    width's whole answers (tf@<n>), heatmap.png shows them by width and step (the median over seeds)."""
    from falcon_lab.plots.addition import plot_addition

    _draw("addition", "--table", table, "addition", out, train_widths, plot_addition)


@app.command()
def ablation(
    table: Annotated[Path | None, typer.Option(
        help="Folder holding alignment.csv (from `lab ablate alignment`); default <results>/ablation.")] = None,
    out: Out = None,
    train_widths: Annotated[str | None, typer.Option(
        help="Operand widths the runs trained on, shaded as LO-HI; default: as the runs were given them "
             "(alignment_per_width.csv's `trained` column, the runs' configs, alignment.md), else none.")] = None,
) -> None:
    """The 2x2 timing x pairing grid of every mixer as heat maps (val acc, held-out mean): alignment.png.

    Also alignment_per_width.png, accuracy against width per cell (one panel per mixer and measure), when
    alignment_per_width.csv is there."""
    from falcon_lab.plots.ablation import plot_ablation

    _draw("ablation", "--table", table, "ablation", out, train_widths, plot_ablation)


@app.command()
def positions(
    csv: Annotated[Path, typer.Option(help="positions.csv from `lab eval addition --positions`.")],
    out: Out = None,
    train_widths: Annotated[str | None, typer.Option(
        help="Operand widths the run trained on, marked as LO-HI; default: its config.yaml beside the CSV "
             "(a run's own positions.csv).")] = None,
) -> None:
    """Teacher-forced accuracy of every answer digit of every width (1-48) as a heat map, with the end token
    beside: <csv stem>.png. Dashed lines mark the trained widths and positions: whether a model loses the
    digits past the trained positions, or every digit of a width it did not train on."""
    from falcon_lab.plots.positions import plot_positions

    _draw("positions", "--csv", csv, None, out, train_widths, plot_positions)
