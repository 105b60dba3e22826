"""The `lab` command line: one Typer app with a command group per job.

Each group lives in `falcon_lab/cli/<group>.py` as a `typer.Typer` named `app`. Group modules import
their heavy dependencies (torch, lightning, optuna) inside the commands, so `lab --help` stays fast.
"""

import importlib
from typing import Annotated

import typer

from falcon_lab import __version__
from falcon_lab.plugins import PluginError, load_plugins

GROUPS = ("data", "train", "eval", "sweep", "reproduce", "ablate", "experiment", "plot", "bench", "report", "runs")

app = typer.Typer(
    name="lab",
    no_args_is_help=True,
    rich_markup_mode="rich",
    pretty_exceptions_show_locals=False,
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"falcon-lab {__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    version: Annotated[
        bool,
        typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """falcon-lab: Falcon fast-weight rules, their baselines, training, sweeps and plots."""


# The plugins of $LAB_PLUGINS (falcon_lab.plugins) register their rules and tasks before the groups list them; a
# plugin that fails is reported by `main`, before any command runs.
try:
    load_plugins()
    _plugin_error: PluginError | None = None
except PluginError as _err:
    _plugin_error = _err

for _name in GROUPS:
    app.add_typer(importlib.import_module(f"falcon_lab.cli.{_name}").app, name=_name)


def main() -> None:
    """Entry point of the `lab` console script. A ConfigError no command caught (a registry or $LAB_RESULTS
    that cannot be used, found deep in a command), or a kernel setting of the environment that is not one, is bad
    input too: one line on stderr, exit code 2."""
    import sys

    from falcon_lab.typed import ConfigError

    if _plugin_error is not None:
        typer.echo(f"lab: {_plugin_error}", err=True)
        raise SystemExit(2)
    try:
        app()
    except ValueError as err:  # a ConfigError, or a kernel setting that says it is bad input (kernels' SettingError)
        if not isinstance(err, ConfigError) and not getattr(err, "bad_input", False):
            raise
        group = next((word for word in sys.argv[1:2] if word in GROUPS), None)
        typer.echo(f"lab{f' {group}' if group else ''}: {err}", err=True)
        sys.exit(2)
