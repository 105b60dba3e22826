"""Plugins: modules outside the package that register rules, tasks or mixers before the `lab` command runs.

    LAB_PLUGINS=my_rules,my_tasks:register lab train --task reverse --mixer falcon-1e

`LAB_PLUGINS` holds comma-separated entries `module` or `module:function`. `lab` imports each module (from
`sys.path`: `PYTHONPATH` or an installed package) once, before it parses its command line, and calls
`function()` where one is named. A plugin registers what it declares with the package's public registries:
`falcon_lab.kernels.register_rule` (a rule: its mixer follows), `falcon_lab.task.register_task` (a task). The
Python API needs no hook: import the module, or call its function, before building a config.
"""

from __future__ import annotations

import importlib
import os

ENV = "LAB_PLUGINS"
_loaded: set[str] = set()


class PluginError(RuntimeError):
    """A plugin named in LAB_PLUGINS that cannot be imported or called."""


def load_plugins(spec: str | None = None) -> list[str]:
    """Import (and call) every entry of `spec` (default: $LAB_PLUGINS) not loaded yet; the entries loaded.
    PluginError, one line naming the entry, when one fails."""
    text = os.environ.get(ENV, "") if spec is None else spec
    done = []
    for entry in (e.strip() for e in text.split(",")):
        if not entry or entry in _loaded:
            continue
        module_name, _, function = entry.partition(":")
        try:
            module = importlib.import_module(module_name)
        except Exception as err:  # a plugin's own import error, whatever it is, is reported as one line
            raise PluginError(f"{ENV}: cannot import {module_name!r}: {type(err).__name__}: {err}") from None
        if function:
            fn = getattr(module, function, None)
            if not callable(fn):
                raise PluginError(f"{ENV}: {module_name!r} has no function {function!r}")
            try:
                fn()
            except Exception as err:
                raise PluginError(f"{ENV}: {entry} failed: {type(err).__name__}: {err}") from None
        _loaded.add(entry)
        done.append(entry)
    return done
