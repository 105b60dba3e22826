"""REPORT.md from the records: five sections, each naming what made it, with its figures drawn beside.

Reads `records/` (or the folder given) and writes `<results>/REPORT.md` and its figures under
`<results>/report/`, linked relatively; never writes into the records. A record a section needs and does
not find is said so in the section; a figure that cannot be drawn is named with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from falcon_lab.report import provenance as prov
from falcon_lab.report.tables import ablation_table, addition_table, best_of, kernels_table, markdown_table

FIGURES = "report"
SECTIONS = ("addition", "ablation", "widths", "sweeps", "kernels")  # REPORT.md's sections, in order


@dataclass
class Report:
    """What `write_report` wrote: REPORT.md, its figures, and the figures it could not draw (path -> why)."""

    path: Path
    figures: list[Path] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)


class Builder:
    """Draws the figures of one report into `<results>/report/` and links them from REPORT.md."""

    def __init__(self, records: Path, results: Path, command: str) -> None:
        self.records, self.results, self.command = records, results, command
        self.report = Report(results / "REPORT.md")

    def shown(self, path: Path) -> str:
        """A records path as the report names it: records/addition/packed (relative to the records' parent)."""
        try:
            return path.resolve().relative_to(self.records.resolve().parent).as_posix()
        except ValueError:
            return path.as_posix()

    def out(self, name: str) -> str:
        """Where the report's figure `name` goes, as a command names it (from the repository root when inside)."""
        from falcon_lab.plots.figure import shown

        return shown(self.results / FIGURES / name)

    def figure(self, name: str, draw: Callable[[Path], list[Path] | Path], caption: str) -> list[str]:
        """Draw `report/<name>` (a folder when `draw` writes several files into it) and return the markdown
        that shows them; a figure that cannot be drawn is a line saying why."""
        target = self.results / FIGURES / name
        try:
            drawn = draw(target)
        except (ValueError, KeyError, OSError) as err:
            self.report.skipped[name] = str(err).splitlines()[0]
            return [f"*{caption}: not drawn ({str(err).splitlines()[0]}).*", ""]
        files = drawn if isinstance(drawn, list) else [drawn]
        self.report.figures += files
        return [line for path in files
                for line in (f"![{caption}]({path.relative_to(self.results).as_posix()})", "")]


def read_csv(path: Path) -> pd.DataFrame:
    """A record's CSV with every cell as written (text; empty cells empty)."""
    return pd.read_csv(path, dtype=str, keep_default_na=False)


TABLE3 = "same-time"  # records/addition/<TABLE3>/: the table of record beside the paper's Table 3
PAPER_METHOD = "paper-method"  # records/addition/<PAPER_METHOD>/: Table 3 by the paper's own method, shown whole


def table3_folder(records: Path) -> Path:
    """The folder of the table shown beside the paper's Table 3: `addition/same-time/` where it holds a table.csv,
    else a table.csv at the top of `addition/` (the older layout)."""
    root = records / "addition"
    return root / TABLE3 if (root / TABLE3 / "table.csv").is_file() else root


def addition_folders(records: Path) -> list[Path]:
    """The addition tables under records/addition: Table 3's first, then every other folder holding a
    table.csv (a record's own, or one part's of an experiment of several), by name."""
    table3 = table3_folder(records)
    top = [table3] if (table3 / "table.csv").is_file() else []
    found = [*(records / "addition").glob("*/table.csv"), *(records / "addition").glob("*/*/table.csv")]
    return top + sorted(p.parent for p in found if p.parent != table3)


def section_addition(b: Builder) -> list[str]:
    """1. Table 3 beside the paper, Table 3 by the paper's method (where a record holds it), and every other addition
    regime the records hold."""
    root = table3_folder(b.records)
    lines = ["## 1. Addition: Table 3 beside the paper", ""]
    if not (root / "table.csv").is_file():
        return lines + [f"No `{b.shown(root / 'table.csv')}` in the records.", ""]
    lines += [prov.of_table(root / "table.md", b.shown(root / "table.md")).markdown(), ""]
    lines += ["Teacher-forced whole-answer accuracy (%), each run at its best step, mean ± std over seeds; "
              "(paper): the paper's Table 3.", "", addition_table(read_csv(root / "table.csv")), ""]
    method = b.records / "addition" / PAPER_METHOD
    if (method / "table.csv").is_file():
        lines += ["### Table 3 by the paper's method", "", prov.of_table(method / "table.md",
                                                                       b.shown(method / "table.md")).markdown(), "",
                  "The Falcon rows with shifted writes and their named options (ctxβ or ctxη, "
                  "ctxλ); as above.", "", addition_table(read_csv(method / "table.csv")), ""]
    lines += ["### The other regimes", "",
              "Every other addition table in the records, with its best row on the trained and on the held-out "
              "widths (the table's own names and splits):", ""]
    for folder in addition_folders(b.records)[1:]:
        if folder == method:
            continue
        frame = read_csv(folder / "table.csv")
        runs = sum(int(float(r or 0)) for r in frame.get("runs", []))
        planned = sum(int(float(r or 0)) for r in frame.get("planned", []))
        source = prov.of_table(folder / "table.md", b.shown(folder / "table.md"))
        lines.append(f"- `{b.shown(folder)}` ({runs} of {planned} runs): best val. acc. {best_of(frame, 'val_acc')}; "
                     f"best held-out mean {best_of(frame, 'ood_mean')}. {source.markdown()}")
    for readme in sorted((b.records / "addition").glob("*/README.md")):
        if (readme.parent / "table.csv").is_file():
            continue
        source = prov.of_runs(readme.parent, readme, b.shown(readme))
        lines.append(f"- `{b.shown(readme.parent)}`: {prov.title_of(readme) or 'README'} (read in "
                     f"`{b.shown(readme)}`). {source.markdown()}")
    return lines + [""]


def section_ablation(b: Builder) -> list[str]:
    """2. The alignment ablation: every records/ablation/<name>/alignment.csv, its table, the findings its
    README.md opens in bold, and its heat maps."""
    from falcon_lab.plots.ablation import plot_ablation

    lines = ["## 2. Alignment ablation: timing × write pairing", ""]
    tables = sorted((b.records / "ablation").glob("*/alignment.csv"))
    if not tables:
        return lines + [f"No `alignment.csv` under `{b.shown(b.records / 'ablation')}`.", ""]
    for csv in tables:
        folder, md = csv.parent, csv.parent / "alignment.md"
        lines += [f"### `{b.shown(folder)}`", "", prov.of_table(md, b.shown(md)).markdown(), ""]
        warning = re.search(r"^\*\*[^\n]+", md.read_text(encoding="utf-8"), re.MULTILINE) if md.is_file() else None
        if warning:
            lines += [warning.group(0), ""]
        lines += [ablation_table(read_csv(csv)), ""]
        readme = folder / "README.md"
        found = headlines(readme.read_text(encoding="utf-8")) if readme.is_file() else []
        if found:
            lines += [f"What it answers (`{b.shown(readme)}`):", "", *(f"- {line}" for line in found), ""]
        name = f"ablation/{folder.name}"
        lines += b.figure(name, lambda out, f=folder, n=name: plot_ablation(
            f, out, command=f"lab plot ablation --table {b.shown(f)} --out {b.out(n)}"),
            f"alignment ablation {folder.name}")
    return lines


def positions_figures(b: Builder, folder: Path, name: str) -> list[str]:
    """One figure of the per-position heat maps of the runs of an addition table that kept a positions.csv:
    a panel per run, named by its row as the paper names it and its seed, in the table's row order."""
    from falcon_lab.plots.grid import display_names, two_lines
    from falcon_lab.plots.positions import plot_positions_grid

    # a run folder's own positions.csv, or its compacted positions.csv.gz (falcon_lab.compact): read_positions reads either
    csvs = sorted({p.parent / "positions.csv" for pattern in ("runs/*/positions.csv", "runs/*/positions.csv.gz")
                   for p in folder.glob(pattern)})
    if not csvs:
        return []
    order: dict[str, tuple[str, int]] = {}  # run id -> (row, seed), from the table's per_width.csv
    if (folder / "per_width.csv").is_file():
        widths = read_csv(folder / "per_width.csv")
        if {"row", "seed", "run_id"} <= set(widths.columns):
            for row, seed, run in widths[["row", "seed", "run_id"]].drop_duplicates().itertuples(index=False):
                if str(seed).isdigit():  # a malformed cell leaves the run to its config below
                    order[str(run)] = (str(row), int(seed))
    runs = []
    for csv in csvs:
        run = csv.parent.name
        if run not in order:
            config = yaml.safe_load((csv.parent / "config.yaml").read_text(encoding="utf-8")) \
                if (csv.parent / "config.yaml").is_file() else {}
            seed = (config.get("train") or {}).get("seed")
            order[run] = (str(config.get("mixer", "?")), seed if isinstance(seed, int) else -1)
        runs.append((order[run], run, csv))
    rows = list(dict.fromkeys(row for (row, _), _, _ in runs))
    table = read_csv(folder / "table.csv") if (folder / "table.csv").is_file() else None
    if table is not None and "row" in table.columns:
        ranked = [str(r) for r in table["row"]]
        rows = sorted(rows, key=lambda r: ranked.index(r) if r in ranked else len(ranked))
    names = display_names(rows, table if table is not None else pd.DataFrame(), folder)
    runs.sort(key=lambda item: (rows.index(item[0][0]), item[0][1], item[1]))
    labels = [f"{two_lines(names[row])}\n{f'seed {seed} · ' if seed >= 0 else ''}{run}" for (row, seed), run, _ in runs]
    out = f"{name}/positions"
    title = (f"Every answer digit of every width, each run at its best step\n{b.shown(folder)}\n"
             f"dashed: the widest trained width and its last digit")
    count = f"{len(runs)} run{'s' if len(runs) > 1 else ''}"
    return [f"Accuracy of every answer digit of every width, {count} (`runs/*/positions.csv`).", ""] + \
        b.figure(out, lambda target, o=out: plot_positions_grid(
            [c for _, _, c in runs], target / "positions.png", labels, title, command="lab report all"),
            f"answer digits, {b.shown(folder)}")


def section_widths(b: Builder, positions: bool) -> list[str]:
    """3. Accuracy by width of every addition table (small multiples, progress), and per-position heat maps."""
    from falcon_lab.plots.addition import plot_addition

    lines = ["## 3. Accuracy by width: curves and heat maps", "",
             "Per table: whole-answer (solid) and per-token (dashed) accuracy against operand width, one panel "
             "per row, each run at its best step; progress while training where the table kept it; and the "
             "accuracy of every answer digit of every width for the runs that kept it (`positions.csv`).", ""]
    for folder in addition_folders(b.records):
        if not (folder / "per_width.csv").is_file():
            continue
        name = "addition" if folder.name == "addition" else f"addition/{folder.name}"
        command = prov.of_table(folder / "table.md", b.shown(folder / "table.md")).command
        lines += [f"### `{b.shown(folder)}`", "", f"Runs made by `{command}`." if command != prov.NOT_RECORDED
                  else "Command: not recorded.", ""]
        lines += b.figure(name, lambda out, f=folder, n=name: plot_addition(
            f, out, command=f"lab plot addition --table {b.shown(f)} --out {b.out(n)}"),
            f"accuracy by width, {b.shown(folder)}")
        if positions:
            lines += positions_figures(b, folder, name)
    return lines


def headlines(text: str, limit: int = 320) -> list[str]:
    """The findings' bullets that open in bold ("- **No trial learned the task.** The six …"): the bold
    headline and the sentence after it, cut at `limit` characters."""
    out = []
    for block in re.findall(r"^- \*\*.+?(?=^\S|^- |\Z)", text, flags=re.MULTILINE | re.DOTALL):
        bullet = " ".join(block[2:].split())
        found = re.match(r"\*\*(.+?)\*\*\s*(.*?\.)(?:\s|$)", bullet)
        gap = "" if found and found.group(2)[:1] in ",;:." else " "
        line = f"**{found.group(1)}**{gap}{found.group(2)}" if found else bullet
        out.append(line if len(line) <= limit else line[:limit - 1].rstrip() + "…")
    return out


def section_sweeps(b: Builder) -> list[str]:
    """4. Every sweep in records/sweeps: its findings' headlines, best trial, and parameter figures."""
    from falcon_lab.plots.sweep import complete_trials, parameter_names, plot_pairs, plot_slice

    lines = ["## 4. Sweeps", ""]
    folders = sorted(p.parent for p in (b.records / "sweeps").glob("*/trials.csv"))
    if not folders:
        return lines + [f"No `trials.csv` under `{b.shown(b.records / 'sweeps')}`.", ""]
    for folder in folders:
        report, findings = folder / "report.md", folder / "findings.md"
        lines += [f"### `{b.shown(folder)}`: {prov.title_of(findings) or folder.name}", "",
                  prov.of_sweep(report, b.shown(report)).markdown(), ""]
        text = report.read_text(encoding="utf-8") if report.is_file() else ""
        objective = re.search(r"objective: maximise (\S+)", text)
        best = re.search(r"^Trial \d+: [^\n]+", text, re.MULTILINE)
        if best:
            lines += [f"Best: {best.group(0).split('; run folder')[0]}.", ""]
        heads = headlines(findings.read_text(encoding="utf-8")) if findings.is_file() else []
        if heads:
            lines += ["Findings (headlines of `" + b.shown(findings) + "`):", "", *(f"- {h}" for h in heads), ""]
        trials = read_csv(folder / "trials.csv").replace("", None)
        for column in ("number", "value"):
            trials[column] = pd.to_numeric(trials[column], errors="coerce")
        name, target = f"sweeps/{folder.name}", objective.group(1) if objective else "objective"
        source = b.shown(folder / "trials.csv")
        done = complete_trials(trials)
        common = sorted(parameter_names(done), key=lambda p: -done[f"params_{p}"].notna().sum())[:3]
        lines += b.figure(f"{name}/slice.png", lambda out: plot_slice(trials, out, target, source, "lab report all"),
                          f"{folder.name}: each parameter")
        lines += b.figure(f"{name}/contour.png", lambda out: plot_pairs(trials, common, out, target, source,
                                                                         "lab report all"),
                          f"{folder.name}: pairs of parameters")
    return lines


def section_kernels(b: Builder) -> list[str]:
    """5. The kernels' times beside fla's: the newest records/bench/kernels-<date>/kernels.csv (or
    records/bench/kernels.csv, the older layout)."""
    from falcon_lab.plots.kernels import plot_kernels

    dated = sorted((b.records / "bench").glob("kernels-*/kernels.csv"))
    csv = dated[-1] if dated else b.records / "bench" / "kernels.csv"
    md = csv.with_name("kernels.md")
    lines = ["## 5. Kernels beside fla", ""]
    if not csv.is_file():
        return lines + [f"No `{b.shown(csv)}` in the records.", ""]
    lines += [prov.of_bullets(md, b.shown(md)).markdown(), "",
              "Our kernels' time, and its ratio to fla's `chunk_delta_rule` and to SDPA at the same shape "
              "(below 1: ours is faster):", "", kernels_table(read_csv(csv)), ""]
    return lines + b.figure("kernels.png", lambda out: plot_kernels(
        csv, out, f"lab report all (from {b.shown(csv)})"), "kernel times beside fla")


def write_report(records: Path, results: Path, positions: bool = True, commit: str | None = None,
                 date: str | None = None, sections: tuple[str, ...] = SECTIONS,
                 on_section: Callable[[str, int, int], None] | None = None) -> Report:
    """Write `<results>/REPORT.md` and its figures from `records`, the `sections` named (`SECTIONS`, kept in
    their order); return what was written. `on_section(name, k, n)` is called as the k-th of n sections starts
    (the command's progress lines)."""
    from falcon_lab.paths import inside_records
    from falcon_lab.runs import atomic_write_text, git_state, now

    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown or not sections:
        raise ValueError(f"unknown report section(s) {', '.join(unknown) or '(none given)'}; "
                         f"the sections are {', '.join(SECTIONS)}")
    if inside_records(results) or _inside(results, records):
        raise ValueError(f"{results} lies in the records ({records}); the report is written under the results "
                         f"folder, never into the records")
    if not records.is_dir():
        raise ValueError(f"{records}: no such records folder")
    b = Builder(records, results, "lab report all")
    state = git_state()
    lines = ["# Report of the records", "",
             f"Made by `lab report all` from `{b.shown(records)}` on {date or now()} at commit "
             f"{commit or state['commit'] or prov.NOT_RECORDED}. Each section names the command, commit, GPU and date "
             "of the records it reads, as they state them (\"not recorded\" where they do not). The numbers are the "
             "records' own; the figures are drawn from the records' CSV files into `report/` beside this file.", "",
             markdown_table(["Section", "Reads"], [row for name, row in zip(SECTIONS, [
                 ["1. Addition: Table 3 beside the paper", f"`{b.shown(records / 'addition')}`"],
                 ["2. Alignment ablation", f"`{b.shown(records / 'ablation')}`"],
                 ["3. Accuracy by width", f"`{b.shown(records / 'addition')}`"],
                 ["4. Sweeps", f"`{b.shown(records / 'sweeps')}`"],
                 ["5. Kernels beside fla", f"`{b.shown(records / 'bench')}`"]]) if name in sections]), ""]
    if set(sections) != set(SECTIONS):
        lines += [f"Sections drawn: {', '.join(n for n in SECTIONS if n in sections)} (of {', '.join(SECTIONS)}).", ""]
    build = {"addition": lambda: section_addition(b), "ablation": lambda: section_ablation(b),
             "widths": lambda: section_widths(b, positions), "sweeps": lambda: section_sweeps(b),
             "kernels": lambda: section_kernels(b)}
    chosen = [name for name in SECTIONS if name in sections]
    for k, name in enumerate(chosen, 1):
        if on_section is not None:
            on_section(name, k, len(chosen))
        lines += build[name]()
    if b.report.skipped:
        lines += ["## Not drawn", "", *(f"- `{name}`: {why}" for name, why in b.report.skipped.items()), ""]
    atomic_write_text(b.report.path, "\n".join(lines).rstrip() + "\n")
    return b.report


def _inside(path: Path, folder: Path) -> bool:
    try:
        path.resolve().relative_to(folder.resolve())
    except ValueError:
        return False
    return True
