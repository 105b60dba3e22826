"""`lab reproduce fineweb`: the paper's FineWeb-Edu perplexity table (Wiki, LAMBADA, FineWeb-Edu).

Every row is a registry mixer trained on the FineWeb-Edu token shards with one preset (`fineweb-124m`,
the paper's §5.1 setting, or `tiny`, the same pipeline at toy size) for each seed; a run's id is the
hash of its configuration, so rerunning the command skips finished runs and resumes unfinished ones.
After every run each finished run's last weights are scored (falcon_lab.eval.perplexity) on the shards' val
split and on the optional local WikiText-103 / LAMBADA files, and the table is rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path

from falcon_lab.config import ConfigError, load_config
from falcon_lab.paths import results_root
from falcon_lab.reproduce.fineweb_rows import PRESETS, ROWS
from falcon_lab.reproduce.fineweb_table import write_tables
from falcon_lab.reproduce.jobs import Job, Outcome
from falcon_lab.reproduce.launch import Campaign, run_campaign
from falcon_lab.reproduce.names import pick_preset, pick_rows
from falcon_lab.reproduce.rows import Row

DATA_HINT = "make one with `lab data fineweb --parquet FILES --tokenizer gpt2.tiktoken --out {path}`"


def parse_rows(text: str | None) -> list[Row]:
    """Rows named in a comma-separated list (all rows for None); ValueError naming the accepted ones."""
    return pick_rows(text, ROWS)


def check_preset(preset: str) -> tuple[str, tuple[str, ...]]:
    """The lab preset and settings behind a reproduce preset; ValueError naming the accepted ones."""
    return pick_preset(preset, PRESETS)


def check_data(path: str | Path) -> None:
    """ValueError (one line saying how to make it) unless `path` holds train and val token shards."""
    from falcon_lab.tasks.fineweb import find_shards

    for split in ("train", "val"):
        try:
            find_shards(path, split)
        except ValueError as err:
            reason = str(err).split(" (make one")[0]
            raise ValueError(f"{reason}; {DATA_HINT.format(path=path)}") from None


def check_text(flag: str, path: str | Path | None) -> Path | None:
    """`path` resolved, or ValueError naming `flag` when the file does not exist."""
    if path is None:
        return None
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{flag} {path} does not exist; accepted: a local text file (.jsonl with a 'text' "
                         f"field per record, or plain text)")
    return path.resolve()


def plan(preset: str, rows: Sequence[Row], seeds: int, max_steps: int | None = None,
         overrides: Sequence[str] = (), data: str | Path | None = None) -> list[Job]:
    """One job per (seed, row), seed by seed. `data` (the shard folder) replaces the preset's data.path.

    Raises ValueError for a bad preset or seed count and ConfigError for a bad override."""
    name, settings = check_preset(preset)
    if seeds < 1:
        raise ValueError(f"--seeds must be >= 1, got {seeds}")
    path = None if data is None else str(Path(data).resolve())
    return [Job(load_config(name, overrides=[*settings, *overrides], task="fineweb", mixer=row.name,
                            train__max_steps=max_steps, train__seed=seed, data__path=path), label=row.name)
            for seed in range(seeds) for row in rows]


def default_out(preset: str, results: Path) -> Path:
    """Where the tables go: `<results>/fineweb` for the paper preset, `<results>/fineweb/<preset>` else."""
    return results / "fineweb" if preset == "fineweb-124m" else results / "fineweb" / preset


def reproduce_fineweb(preset: str = "fineweb-124m", rows: Sequence[Row] | None = None, seeds: int = 1,
                      gpus: int = 1, max_steps: int | None = None, overrides: Sequence[str] = (),
                      data: str | Path | None = None, wiki: str | Path | None = None,
                      lambada: str | Path | None = None, results: str | Path | None = None,
                      out: str | Path | None = None, command: str = "lab reproduce fineweb",
                      on_done: Callable[[Outcome], None] | None = None, per_gpu: int = 1,
                      table_only: bool = False, gpus_per_run: int = 1) -> Campaign:
    """Train the rows' runs not yet finished (up to `gpus` at once, each on `gpus_per_run` GPUs), score
    every finished run's perplexities, and write table.md and table.csv to `out` after every run."""
    rows = list(ROWS) if rows is None else list(rows)
    texts = {"wikitext-103": check_text("--wiki", wiki), "lambada": check_text("--lambada", lambada)}
    jobs = plan(preset, rows, seeds, max_steps, overrides, data)
    check_data(jobs[0].cfg.data.path)
    wanted = {r.name for r in rows}
    # The table holds every row, but one whose mixer rejects an override (a --set option it has not): it has no
    # runs under it.
    everything = []
    for row in ROWS:
        try:
            everything += plan(preset, [row], seeds, max_steps, overrides, data)
        except ConfigError:
            if row.name in wanted:
                raise
    everything.sort(key=lambda j: j.cfg.train.seed)  # seed by seed, as the plan orders the rows
    results = Path(results).resolve() if results is not None else results_root()
    out = Path(out).resolve() if out is not None else default_out(preset, results)
    return run_campaign(jobs, everything, partial(write_tables, texts=texts), results, out, gpus, command, on_done,
                        per_gpu=per_gpu, table_only=table_only,
                        gpus_per_run=gpus_per_run)
