"""`lab report`: what the run registry holds."""

from pathlib import Path
from typing import Annotated

import typer

app = typer.Typer(help="Report on recorded runs.")

SHOWN = ("id", "task", "mixer", "preset", "status", "steps", "final_loss", "final_val_loss", "final_val_acc",
         "n_params", "device", "commit", "updated_at")


@app.command()
def runs(
    root: Annotated[Path | None, typer.Option(
        help="Results folder holding lab.db; default $LAB_RESULTS or the checkout's results/.")] = None,
    task: Annotated[str | None, typer.Option(help="Only runs of this task.")] = None,
    mixer: Annotated[str | None, typer.Option(help="Only runs of this mixer.")] = None,
    status: Annotated[str | None, typer.Option(help="Only runs in this state (running, finished, failed...).")] = None,
    csv: Annotated[Path | None, typer.Option(help="Also write the selected rows, every column, to this CSV.")] = None,
) -> None:
    """List runs from the registry with their metrics, commit and machine."""
    from rich.console import Console
    from rich.table import Table

    from lab.runs import Registry, atomic_write_text, results_root

    db = (root if root is not None else results_root()) / "lab.db"
    if not db.exists():
        typer.echo(f"lab report runs: no registry at {db}; train a run first (lab train ...)", err=True)
        raise typer.Exit(code=1)
    wanted = {"task": task, "mixer": mixer, "status": status}
    rows = [r for r in Registry(db).rows() if all(v is None or r.get(k) == v for k, v in wanted.items())]
    table = Table(title=f"{len(rows)} run(s) in {db}")
    for col in SHOWN:
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(*(_cell(col, r.get(col)) for col in SHOWN))
    Console().print(table)
    if csv is not None:
        import pandas as pd

        atomic_write_text(csv, pd.DataFrame(rows).to_csv(index=False))
        typer.echo(f"wrote {csv}")


def _cell(column: str, value: object) -> str:
    if value is None:
        return ""
    if column == "commit":
        return str(value)[:10]
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
