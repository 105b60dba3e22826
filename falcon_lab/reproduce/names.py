"""Choosing a campaign's rows and preset by name, with errors that list what is accepted."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol, TypeVar

from falcon_lab.config import ConfigError
from falcon_lab.config import presets as preset_files
from falcon_lab.reproduce import addition_rows, fineweb_rows
from falcon_lab.reproduce.addition_rows import ROW_SETTINGS as ADDITION_ROW_SETTINGS


class Named(Protocol):
    name: str


R = TypeVar("R", bound=Named)
V = TypeVar("V")


def pick_rows(text: str | None, rows: Sequence[R]) -> list[R]:
    """The rows named in a comma-separated list, in its order, each once (all rows for None); ValueError
    naming the accepted ones."""
    if text is None:
        return list(rows)
    by_name = {r.name: r for r in rows}
    accepted = ", ".join(by_name)
    names = [n.strip() for n in text.split(",") if n.strip()]
    if not names:
        raise ValueError(f"--rows is empty; accepted: {accepted}")
    for name in names:
        if name not in by_name:
            raise ValueError(f"unknown row {name!r}; accepted: {accepted}")
    return [by_name[n] for n in dict.fromkeys(names)]


def pick_preset(preset: str, presets: Mapping[str, V]) -> V:
    """What `presets` holds for `preset`; ValueError naming the accepted ones."""
    if preset not in presets:
        raise ValueError(f"unknown preset {preset!r}; accepted: {', '.join(presets)}")
    return presets[preset]


# One set of preset names for `lab train`, `lab reproduce` and `lab ablate`. A campaign preset (a key of a
# track's PRESETS: a lab preset and settings over it) is called everywhere by its lab preset's name when it
# adds no settings (`paper`: addition-paper) and by its track and key when it does (`packed`:
# addition-packed); the keys themselves stay accepted by the campaigns as older spellings.
TRACK_PRESETS = {"addition": addition_rows.PRESETS, "fineweb": fineweb_rows.PRESETS}
TRACKS = tuple(TRACK_PRESETS)


def track_presets(track: str) -> Mapping[str, tuple[str, tuple[str, ...]]]:
    """The campaign presets of a track: key -> (lab preset, settings over it)."""
    if track not in TRACK_PRESETS:
        raise ValueError(f"unknown track {track!r}; accepted: {', '.join(TRACKS)}")
    return TRACK_PRESETS[track]


def campaign_names(track: str) -> dict[str, str]:
    """The name of each campaign preset of `track`, mapped to its key."""
    out = {}
    for key, (base, settings) in track_presets(track).items():
        name = base if not settings else key if key.startswith(f"{track}-") else f"{track}-{key}"
        out[name] = key
    return out


def campaign_preset(track: str, name: str) -> str:
    """The key of the campaign preset of `track` called `name` (its name or its key); ValueError naming the
    accepted names."""
    names = campaign_names(track)
    if name in names:
        return names[name]
    if name in names.values():
        return name
    raise ValueError(f"unknown preset {name!r}; accepted: {', '.join(names)} "
                     f"(older spellings: {', '.join(names.values())})")


def preset_names() -> list[str]:
    """Every preset name `lab train` takes: the files in falcon_lab/presets and the campaign presets' names."""
    return sorted({*preset_files(), *(n for track in TRACKS for n in campaign_names(track))})


def row_settings(track: str, key: str, mixer: str | None) -> tuple[str, ...]:
    """The settings a campaign preset gives one row of its own (the tiny addition table's transformer)."""
    if track != "addition" or mixer is None:
        return ()
    return ADDITION_ROW_SETTINGS.get(key, {}).get(mixer, ())


def train_preset(name: str, mixer: str | None = None) -> tuple[str, tuple[str, ...]]:
    """The lab preset file and the settings over it that preset `name` stands for in `lab train` of `mixer`:
    a campaign preset's name (with the settings the campaign gives that mixer's row, so that `lab train`
    makes the campaign's run), a file in falcon_lab/presets, or a campaign's older spelling that is not a file's
    name (`tiny` is the file). ConfigError naming the accepted names."""
    files = preset_files()
    for track in TRACKS:
        names = campaign_names(track)
        key = names.get(name, name if name in names.values() and name not in files else None)
        if key is not None:
            base, settings = track_presets(track)[key]
            return base, (*settings, *row_settings(track, key, mixer))
    if name in files:
        return name, ()
    raise ConfigError(f"unknown preset {name!r}; accepted: {', '.join(preset_names())}")


def preset_help(track: str, what: dict[str, str]) -> str:
    """Help of a campaign's --preset option: each name with what `what` says of its key."""
    names = campaign_names(track)
    listed = ", ".join(f"{n} ({what[k]})" if k in what else n for n, k in names.items())
    return f"{listed}: lab train takes the same names. Older names accepted: {', '.join(names.values())}."
