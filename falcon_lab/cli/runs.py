"""`lab runs`: the results folder's runs, and runs made elsewhere brought into it."""

from pathlib import Path
from typing import Annotated

import typer

from falcon_lab.cli._common import refuse

app = typer.Typer(help="Bring runs made on other machines into this results folder; compact run records.", no_args_is_help=True)


@app.callback()
def _group() -> None:
    """Bring runs made on other machines into this results folder; compact run records."""


@app.command()
def merge(
    source: Annotated[Path, typer.Argument(
        help="A copy of another machine's results folder (its runs/ and lab.db), or a folder of run "
             "records <id>/run.json as records/<track>/.../runs/ keeps them, or an archive of them (.tgz, "
             "as `lab experiment run --snapshot-dir` writes) (read only).")],
    results: Annotated[Path | None, typer.Option(
        help="The results folder to merge into; default $LAB_RESULTS or the checkout's results/.")] = None,
    dry_run: Annotated[bool, typer.Option(help="Say what would be done and write nothing.")] = False,
) -> None:
    """Take each run of SOURCE that is new here or went further there (finished, else more steps):
    its folder and its registry row; keep every run that went as far here. A line per run, then a count.
    Run records (a track's runs/ in git) get their registry rows rebuilt from their files. Then `lab reproduce ... --table-only` writes the tables from the merged runs."""
    from falcon_lab.merge import ACTIONS, merge_results
    from falcon_lab.paths import results_root

    into = results if results is not None else results_root()
    try:
        done = merge_results(source, into, dry_run=dry_run, on_run=lambda m: typer.echo(m.line()))
    except ValueError as err:
        refuse("lab runs merge", err)
    counts = ", ".join(f"{sum(m.action == a for m in done)} {a}" for a in ACTIONS
                       if any(m.action == a for m in done))
    verb = "would merge" if dry_run else "merged"
    typer.echo(f"{verb} {Path(source).resolve()} into {Path(into).resolve()}: {len(done)} runs "
               f"({counts or 'none'})")


@app.command()
def compact(
    folder: Annotated[Path, typer.Argument(
        help="A run folder, or a folder above run folders (a track's records, a results folder's runs/).")],
    dry_run: Annotated[bool, typer.Option(help="Say what would be gzipped and write nothing.")] = False,
) -> None:
    """Gzip the large files of each finished run under FOLDER (positions.csv, metrics.csv, evals.csv and
    Lightning's CSV log -> <name>.gz), as the records keep them in git: deterministic bytes, the plain file removed
    only once its copy reads back. Every reader (the tables, `lab report`, `lab plot`, the records' scripts) reads
    either form. Runs not finished are left as they are."""
    from falcon_lab.compact import compact_runs

    try:
        written = compact_runs(folder, dry_run=dry_run)
    except ValueError as err:
        refuse("lab runs compact", err)
    for path in written:
        typer.echo(f"{'would gzip' if dry_run else 'gzipped'} {path.with_suffix('')}")
    typer.echo(f"{'would compact' if dry_run else 'compacted'} {len(written)} file{'s' * (len(written) != 1)} "
               f"under {folder}")
