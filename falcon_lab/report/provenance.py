"""Where a record came from: the command, commit, machine and date its own files state.

Each kind of record states them its own way: a table's markdown (`Remade by `…` … Table written DATE at
commit C; runs trained at C on DEVICE.`), the kernel benchmark's bullets (`- GPU: …`), a sweep's report.md
(`- command (DATE): `…``, `trials ran at commit(s) …`, `- hardware: …`), and free-written READMEs, from which
the first of each is taken. What a record does not state is "not recorded", never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

NOT_RECORDED = "not recorded"


@dataclass(frozen=True)
class Provenance:
    """What made a record, as its file `source` states it; NOT_RECORDED where it does not."""

    source: str
    command: str = NOT_RECORDED
    commit: str = NOT_RECORDED
    gpu: str = NOT_RECORDED
    date: str = NOT_RECORDED
    runs: int = 0  # the runs whose own provenance.json were read beside `source`

    def markdown(self) -> str:
        """One line for the report: command, commit, GPU, date, and the file they are read from. A machine
        without a GPU is named as such ("none (CPU: AMD EPYC)")."""
        command = self.command if self.command == NOT_RECORDED else f"`{self.command}`"
        gpu = self.gpu
        if gpu != NOT_RECORDED and not re.search(r"NVIDIA|H\d00|A100|GPU|cuda", gpu, re.IGNORECASE):
            gpu = f"none (CPU: {gpu})"
        runs = f" and the `provenance.json` of its {self.runs} run{'s' if self.runs != 1 else ''}" if self.runs else ""
        return (f"Command: {command}. Commit: {self.commit}. GPU: {gpu}. Date: {self.date}. "
                f"(As `{self.source}`{runs} state{'' if runs else 's'}.)")


def _first(pattern: str, text: str, group: int = 1) -> str | None:
    found = re.search(pattern, text, flags=re.MULTILINE)
    return found.group(group).strip() if found else None


def of_table(path: Path, shown: str) -> Provenance:
    """A table's markdown as `lab reproduce` and `lab ablate` write it (table.md, alignment.md)."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    runs = _first(r"runs trained at ([^.]*?) on ", text)
    table = _first(r"Table written \S+ at commit (\w+)", text)
    commit = "; ".join(p for p in (f"runs trained at {runs}" if runs else None,
                                   f"table written at {table}" if table else None) if p)
    device = _first(r"runs trained at [^.]*? on (.+?)\.(?: \d+ of \d+ planned|\s*$)", text)
    return Provenance(shown, command=_first(r"Remade by `([^`]+)`", text) or NOT_RECORDED,
                      commit=commit or NOT_RECORDED, gpu=device or NOT_RECORDED,
                      date=_first(r"Table written (\S+) at", text) or NOT_RECORDED)


def of_bullets(path: Path, shown: str) -> Provenance:
    """A record headed by bullets (`- GPU: …`, `- commit: …`, `- date: …`, `- command: `…``): kernels.md."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    return Provenance(shown, command=_first(r"^- command: `([^`]+)`", text) or NOT_RECORDED,
                      commit=_first(r"^- commit: (\S+)", text) or NOT_RECORDED,
                      gpu=_first(r"^- GPU: (.+)$", text) or NOT_RECORDED,
                      date=_first(r"^- date: (.+)$", text) or NOT_RECORDED)


def of_sweep(path: Path, shown: str) -> Provenance:
    """A sweep's report.md (`lab sweep report`): every command with its date, the trials' commits and hardware."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    runs = re.findall(r"^- command \(([^)]+)\): `([^`]+)`", text, flags=re.MULTILINE)
    return Provenance(shown, command="`; `".join(dict.fromkeys(c for _, c in runs)) or NOT_RECORDED,
                      commit=_first(r"trials ran at commit\(s\) (.+)$", text) or NOT_RECORDED,
                      gpu=_first(r"^- hardware: (.+)$", text) or NOT_RECORDED,
                      date=", ".join(d for d, _ in runs) or NOT_RECORDED)


COMMAND = r"`((?:OMP_NUM_THREADS=\d+ |LAB_COMMIT=\S+ )*(?:lab|bash|python) [^`]+)`"
COMMIT = r"commit `?([0-9a-f]{7,40})\b"
GPU = r"(NVIDIA [A-Z][A-Za-z0-9]*(?: x\d+)?|\bH200s?\b|AMD EPYC|\d-core CPU|\bCPU\b)"
# A command in an indented code block, with its continuation lines (ending in a backslash).
CODE = r"^ {4}((?:[A-Z_]+=\S+ )*(?:lab|bash|python) (?:[^\n]*\\\n)*[^\n]*)"
DATE = r"\b(20\d\d-\d\d-\d\d(?:[ T]\d\d:\d\d(?::\d\d)?(?:\+00:00| UTC)?)?)"


def of_text(path: Path, shown: str) -> Provenance:
    """A free-written record (a README, notes, findings): the first command, commit, machine and date it names;
    of the commands, the first `lab …` or `bash …` one (the device call) before any helper script."""
    text = path.read_text(encoding="utf-8") if path.is_file() else ""
    found = sorted([(m.start(), " ".join(m.group(1).split())) for m in re.finditer(COMMAND, text)]
                   + [(m.start(), _joined(m.group(1))) for m in re.finditer(CODE, text, flags=re.MULTILINE)])
    commands = [c for _, c in found]
    command = next((c for c in commands if re.search(r"(^|\s)(lab|bash) ", c)), commands[0] if commands else None)
    return Provenance(shown, command=command or NOT_RECORDED, commit=_first(COMMIT, text) or NOT_RECORDED,
                      gpu=_first(GPU, text) or NOT_RECORDED, date=_first(DATE, text) or NOT_RECORDED)


def of_runs(folder: Path, readme: Path, shown: str) -> Provenance:
    """A folder of runs with a README (a device call's record): the commits, machines and dates of its runs'
    own provenance.json, and the device scripts (`bash …`) the README names; `of_text(readme)` without runs."""
    import json

    runs = []
    for path in sorted(folder.rglob("provenance.json")):
        try:
            runs.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue  # a provenance that does not read states nothing
    if not runs:
        return of_text(readme, shown)
    runs.sort(key=lambda r: str(r.get("date") or ""))
    commits = ", ".join(dict.fromkeys(str(r["commit"])[:7] for r in runs if r.get("commit")))
    devices = ", ".join(dict.fromkeys(str(r["device"]) for r in runs if r.get("device")))
    dates = [str(r["date"]) for r in runs if r.get("date")]
    text = readme.read_text(encoding="utf-8") if readme.is_file() else ""
    scripts = [" ".join(c.split()) for c in re.findall(COMMAND, text) if re.match(r"(\S+=\S+ )*bash ", c)]
    return Provenance(shown, runs=len(runs),
                      command="`; `".join(dict.fromkeys(scripts)) or of_text(readme, shown).command,
                      commit=commits or NOT_RECORDED, gpu=devices or NOT_RECORDED,
                      date=(dates[0] if dates[0] == dates[-1] else f"{dates[0]} to {dates[-1]}") if dates
                      else NOT_RECORDED)


def _joined(command: str) -> str:
    """A command written over several lines (each ending in a backslash) on one line."""
    return " ".join(part.strip() for part in command.split("\\\n"))


def title_of(path: Path) -> str | None:
    """The first markdown heading of a file, without its #."""
    if not path.is_file():
        return None
    return _first(r"^#+ (.+)$", path.read_text(encoding="utf-8"))
