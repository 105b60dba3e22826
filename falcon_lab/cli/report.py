"""`lab report`: REPORT.md from the records (`lab report`, `lab report all`), what the run registry holds
(`runs`), and where answers break (`positions`)."""

from pathlib import Path
from typing import Annotated

import typer

from falcon_lab.cli._common import writable_out

app = typer.Typer(help="Report on recorded runs: with no command, REPORT.md from the records (as `lab report all`).")

SHOWN = ("id", "task", "mixer", "preset", "status", "steps", "final_loss", "final_val_loss", "final_val_acc",
         "n_params", "device", "commit", "updated_at")


@app.callback(invoke_without_command=True)
def _default(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        report_all(records=None, results=None, positions=True, section=None, progress=None)


@app.command("all")
def report_all(
    records: Annotated[Path | None, typer.Option(
        help="The records to report on; default the checkout's records/.")] = None,
    results: Annotated[Path | None, typer.Option(
        help="Results folder REPORT.md and report/ go to; default $LAB_RESULTS or the checkout's results/.",
        callback=writable_out)] = None,
    positions: Annotated[bool, typer.Option(
        help="Draw the per-position heat map of every run that kept a positions.csv (the longest part).")] = True,
    section: Annotated[list[str] | None, typer.Option(
        help="Only this section (repeatable): addition, ablation, widths, sweeps, kernels; default every one.")] = None,
    progress: Annotated[bool | None, typer.Option(
        "--progress/--no-progress", help="A line on stderr as each section starts, with the time so far (default: "
                                         "when stderr is a terminal).")] = None,
) -> None:
    """REPORT.md from the records, in one command: Table 3 beside the paper and the other addition regimes,
    the alignment ablation, accuracy by width (curves and per-position heat maps), the sweeps' findings and
    the kernels beside fla; each section with the command, commit, GPU and date that made it. The figures
    are drawn from the records' CSV files into report/ beside REPORT.md; nothing is written into records/."""
    import sys
    import time

    from falcon_lab.console import say
    from falcon_lab.paths import records_root, results_root
    from falcon_lab.report.build import SECTIONS, write_report

    start = time.monotonic()

    def say_section(name: str, k: int, n: int) -> None:
        # on stderr: stdout keeps the one line saying where the report is
        say(f"[{time.monotonic() - start:.0f} s] section {k} of {n}: {name}", err=True)

    try:
        out = write_report(records if records is not None else records_root(),
                           results if results is not None else results_root(), positions=positions,
                           sections=tuple(section) if section else SECTIONS,
                           on_section=say_section if (progress if progress is not None else sys.stderr.isatty())
                           else None)
    except ValueError as err:
        typer.echo(f"lab report: {err}", err=True)
        raise typer.Exit(code=2) from None
    typer.echo(f"report: {out.path} ({len(out.figures)} figures in {out.path.parent / 'report'})")
    for name, why in out.skipped.items():
        typer.echo(f"not drawn: {name} ({why})")


@app.command()
def runs(
    results: Annotated[Path | None, typer.Option(
        "--results", "--root", help="Results folder holding lab.db; default $LAB_RESULTS or the checkout's results/ "
                                    "(--root: its older name).")] = None,
    task: Annotated[str | None, typer.Option(help="Only runs of this task.")] = None,
    mixer: Annotated[str | None, typer.Option(help="Only runs of this mixer.")] = None,
    status: Annotated[str | None, typer.Option(help="Only runs in this state (running, finished, failed...).")] = None,
    csv: Annotated[Path | None, typer.Option(help="Also write the selected rows, every column, to this CSV.")] = None,
    plain: Annotated[bool | None, typer.Option(
        "--plain/--table", help="Plain rows, one a line with every cell whole and aligned, '-' for an empty one "
                                "(default when stdout is not a terminal, as in a pipe), or a table drawn for a "
                                "terminal's width.")] = None,
) -> None:
    """List runs from the registry with their metrics, commit and machine."""
    import sys

    from falcon_lab.config import ConfigError
    from falcon_lab.paths import results_root
    from falcon_lab.runs import Registry, atomic_write_text

    try:
        db = (results if results is not None else results_root()) / "lab.db"
        if not db.exists():
            typer.echo(f"lab report runs: no registry at {db}; train a run first (lab train ...)", err=True)
            raise typer.Exit(code=1)
        registry = Registry(db)
    except ConfigError as err:
        typer.echo(f"lab report runs: {err}", err=True)
        raise typer.Exit(code=2) from None
    wanted = {"task": task, "mixer": mixer, "status": status}
    rows = [r for r in registry.rows() if all(v is None or r.get(k) == v for k, v in wanted.items())]
    title = f"{len(rows)} run(s) in {db}"
    if plain if plain is not None else not sys.stdout.isatty():
        typer.echo(title)
        cells = [list(SHOWN), *([_cell(col, r.get(col)) or "-" for col in SHOWN] for r in rows)]
        widths = [max(len(line[i]) for line in cells) for i in range(len(SHOWN))]
        for line in cells:
            typer.echo("  ".join(cell.ljust(w) for cell, w in zip(line, widths)).rstrip())
    else:
        from rich.console import Console
        from rich.table import Table

        table = Table(title=title)
        for col in SHOWN:
            table.add_column(col, overflow="fold")
        for r in rows:
            table.add_row(*(_cell(col, r.get(col)) for col in SHOWN))
        Console().print(table)
    if csv is not None:
        import pandas as pd

        atomic_write_text(csv, pd.DataFrame(rows).to_csv(index=False))
        typer.echo(f"wrote {csv}")


@app.command()
def positions(
    csv: Annotated[list[Path], typer.Argument(
        help="positions.csv files (a run's own, or from `lab eval addition --positions`).")],
    widths: Annotated[str, typer.Option(help="Comma-separated widths to show.")] = "16,24,28,32,36,40,48",
    which: Annotated[str, typer.Option(help="Of a run's positions.csv: the best or the last weights.")] = "best",
    threshold: Annotated[float, typer.Option(help="Accuracy (%) at which a digit counts as right.")] = 90.0,
    out: Annotated[Path | None, typer.Option(help="Also write every width of every file to this CSV.")] = None,
) -> None:
    """Where each run's answers break, as "low + high": the answer digits right from the least significant
    end and from the most significant end before the first wrong one, at each width ("all N" when every
    digit is right). Fixed low and high over widths mean the model aligns operand digits only near the
    answer and near the sample's start; it then answers up to width low + high - 1."""
    import pandas as pd

    from falcon_lab.plots.positions import digit_ends, read_positions
    from falcon_lab.runs import atomic_write_text

    try:
        shown = [int(w) for w in widths.split(",") if w.strip()]
    except ValueError:
        typer.echo(f"lab report positions: --widths must be comma-separated integers, got {widths!r}", err=True)
        raise typer.Exit(code=2) from None
    if which not in ("best", "last"):
        typer.echo(f"lab report positions: --which must be best or last, got {which!r}", err=True)
        raise typer.Exit(code=2)
    tables = []
    for path in csv:
        try:
            frame = read_positions(path)
        except (OSError, ValueError) as err:
            typer.echo(f"lab report positions: {err}", err=True)
            raise typer.Exit(code=2) from None
        if "which" in frame.columns:
            frame = frame[frame["which"] == which]
        ends = digit_ends(frame, threshold)
        ends.insert(0, "file", path.as_posix())
        tables.append(ends)
    every = pd.concat(tables, ignore_index=True)
    header = ["file", "step", *(f"width {w}" for w in shown)]
    typer.echo("| " + " | ".join(header) + " |")
    typer.echo("|" + "---|" * len(header))
    for name, group in every.groupby("file", sort=False):
        by_width = group.set_index("width")
        cells = []
        for w in shown:
            if w not in by_width.index:
                cells.append("—")
                continue
            r = by_width.loc[w]
            cells.append(f"all {r['digits']}" if r["low"] == r["digits"] else f"{r['low']} + {r['high']}")
        step = str(int(group["step"].iloc[0])) if "step" in group.columns else "—"
        typer.echo("| " + " | ".join([str(name), step, *cells]) + " |")
    if out is not None:
        atomic_write_text(out, every.to_csv(index=False))
        typer.echo(f"wrote {out}")


def _cell(column: str, value: object) -> str:
    if value is None:
        return ""
    if column == "commit":
        return str(value)[:10]
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
