"""Hyper-parameter search spaces (YAML files beside this one) for `lab sweep run`.

- `regime.yaml`: the training regime of one mixer (learning rate, batch size, width, depth, steps,
  curriculum); the mixer comes from `--mixer`.
- `rules.yaml`: the Falcon rules' knobs (rule, gain mode, constant beta, base ridge, window B, QK-norm,
  learning rate).

The schema is falcon_lab.sweep.space's; `lab sweep run NAME` finds `NAME.yaml` here.
"""

from __future__ import annotations

from pathlib import Path

SPACES_DIR = Path(__file__).resolve().parent


def spaces() -> list[str]:
    """Names of the search spaces shipped here."""
    return sorted(p.stem for p in SPACES_DIR.glob("*.yaml"))


def space_path(name: str) -> Path:
    """The file of space `name` (a shipped space's name, or a path to a YAML file); ValueError naming the
    accepted names when there is no such space."""
    path = Path(name)
    if path.suffix in (".yaml", ".yml") or path.exists():
        if not path.is_file():
            raise ValueError(f"space file {path} does not exist; shipped spaces: {', '.join(spaces())}")
        return path
    if name in spaces():
        return SPACES_DIR / f"{name}.yaml"
    raise ValueError(f"unknown space {name!r}; accepted: {', '.join(spaces())}, or a path to a YAML file")
