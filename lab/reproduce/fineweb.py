"""`lab reproduce fineweb`: the paper's FineWeb-Edu perplexity table (Wiki, LAMBADA, FineWeb-Edu).

Every row is a registry mixer trained on the FineWeb-Edu token shards with one preset (`fineweb-124m`,
the paper's §5.1 setting, or `tiny`, the same pipeline at toy size) for each seed; a run's id is the
hash of its configuration, so rerunning the command skips finished runs and resumes unfinished ones.
After every run each finished run's last weights are scored (lab.eval.perplexity) on the shards' val
split and on the optional local WikiText-103 / LAMBADA files, and the table is rewritten.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from lab.config import load_config
from lab.paths import results_root
from lab.reproduce.launch import Campaign, Job, Outcome, run_campaign
from lab.reproduce.names import pick_preset, pick_rows

# Reproduce preset -> (lab preset, settings over it). `tiny` keeps the 124M preset's task, optimiser
# and data layout but shrinks the model, rows and schedule so the whole pipeline runs on a CPU.
PRESETS: dict[str, tuple[str, tuple[str, ...]]] = {
    "fineweb-124m": ("fineweb-124m", ()),
    "tiny": ("fineweb-124m", (
        "model.d_model=32", "model.n_layers=2", "model.n_heads=2", "train.max_steps=20", "train.batch_size=8",
        "train.precision=auto", "train.val_every=10", "train.ckpt_every=10", "optim.warmup_steps=2",
        "data.seq_len=32", "data.val_windows=4")),
}
DATA_HINT = "make one with `lab data fineweb --parquet FILES --tokenizer gpt2.tiktoken --out {path}`"


@dataclass(frozen=True)
class PaperNumbers:
    """A row of the paper's FineWeb-Edu table: perplexity on WikiText-103, LAMBADA and FineWeb-Edu."""

    wiki: float
    lambada: float
    fineweb: float


@dataclass(frozen=True)
class Row:
    """A table row: the registry mixer it trains, its label, and the paper's numbers when it has them."""

    name: str
    label: str
    paper: PaperNumbers | None = None


# Table 1 of the paper's text in shared/paper lists Falcon-3A.3 and no Falcon-1.3; the Falcon-1.3 numbers are
# SPEC §4's (the project's reference for the paper's numbers), kept so the regression rule has its anchor.
ROWS: tuple[Row, ...] = (
    Row("transformer", "Transformer", PaperNumbers(33.25, 47.43, 17.38)),
    Row("retnet", "RetNet", PaperNumbers(36.86, 65.16, 18.79)),
    Row("mamba2", "Mamba-2", PaperNumbers(34.53, 48.74, 17.70)),
    Row("deltanet", "DeltaNet", PaperNumbers(34.19, 52.84, 17.84)),
    Row("gated-deltanet", "Gated DeltaNet", PaperNumbers(30.99, 46.70, 17.32)),
    Row("falcon-1a.1", "Falcon-1A.1", PaperNumbers(34.41, 47.93, 17.70)),
    Row("falcon-1a.2", "Falcon-1A.2", PaperNumbers(34.20, 51.01, 17.70)),
    Row("falcon-1a.3", "Falcon-1A.3", PaperNumbers(34.02, 49.84, 17.40)),
    Row("falcon-1.3", "Falcon-1.3", PaperNumbers(33.00, 48.70, 17.10)),
    Row("falcon-3a.3", "Falcon-3A.3", PaperNumbers(34.08, 53.38, 17.59)),
)
ROW_NAMES = tuple(r.name for r in ROWS)
ROW_BY_NAME = {r.name: r for r in ROWS}
# The scored sources: (name in perplexity.json, table column); only fineweb-edu-val is always scored.
SOURCES = (("wikitext-103", "wiki"), ("lambada", "lambada"), ("fineweb-edu-val", "fineweb"))


def parse_rows(text: str | None) -> list[Row]:
    """Rows named in a comma-separated list (all rows for None); ValueError naming the accepted ones."""
    return pick_rows(text, ROWS)


def check_preset(preset: str) -> tuple[str, tuple[str, ...]]:
    """The lab preset and settings behind a reproduce preset; ValueError naming the accepted ones."""
    return pick_preset(preset, PRESETS)


def check_data(path: str | Path) -> None:
    """ValueError (one line saying how to make it) unless `path` holds train and val token shards."""
    from tasks.fineweb import find_shards

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
    from lab.reproduce.fineweb_table import write_tables

    rows = list(ROWS) if rows is None else list(rows)
    texts = {"wikitext-103": check_text("--wiki", wiki), "lambada": check_text("--lambada", lambada)}
    everything = plan(preset, ROWS, seeds, max_steps, overrides, data)
    check_data(everything[0].cfg.data.path)
    wanted = {r.name for r in rows}
    jobs = [j for j in everything if j.cfg.mixer in wanted]
    results = Path(results).resolve() if results is not None else results_root()
    out = Path(out).resolve() if out is not None else default_out(preset, results)
    return run_campaign(jobs, everything, partial(write_tables, texts=texts), results, out, gpus, command, on_done,
                        per_gpu=per_gpu, table_only=table_only,
                        gpus_per_run=gpus_per_run)
