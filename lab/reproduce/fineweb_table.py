"""The FineWeb-Edu table from finished runs: each run's perplexities, then table.md and table.csv.

A finished run is scored once, with its last weights, in non-overlapping windows of its own row
length (lab.eval.perplexity): the val split of its shard folder, and the local WikiText-103 and
LAMBADA files when given (tokenised with the tokenizer the shard manifest names). The scores live
in the run's perplexity.json, so rewriting the table rescores nothing. Ours are mean ± sample
standard deviation over the seeds of a row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from lab.eval.perplexity import RESULTS_FILE, read_texts, record, stream_nll
from lab.reproduce.addition_table import (
    finished_runs,
    format_cell,
    format_params,
    markdown_table,
    mean_std,
    provenance_sentence,
)
from lab.reproduce.launch import Job
from lab.runs import atomic_write_text, run_dir_for

COLUMNS = (("wiki", "Wiki"), ("lambada", "LAMBADA"), ("fineweb", "FineWeb-Edu"))


def _sources(job: Job, texts: Mapping[str, Path | None]) -> dict[str, Path]:
    """What a run is scored on: name -> file or shard folder."""
    from lab.reproduce.fineweb import SOURCES

    wanted = {"fineweb-edu-val": Path(job.cfg.data.path).resolve(), **texts}
    return {name: Path(wanted[name]) for name, _ in SOURCES if wanted.get(name) is not None}


def _tokens(name: str, source: Path, folder: Path, vocab: int) -> np.ndarray:
    from tasks.fineweb import (
        encode_documents,
        find_shards,
        load_tokenizer,
        read_manifest,
        read_shard,
    )

    if name == "fineweb-edu-val":
        return np.concatenate([read_shard(p, vocab) for p in find_shards(source, "val")])
    manifest = read_manifest(folder)
    if manifest is None:
        raise ValueError(f"shard folder {folder} has no manifest naming its tokenizer, needed for {source}")
    enc = load_tokenizer(manifest["settings"]["tokenizer"])
    if enc.n_vocab > vocab:
        raise ValueError(f"tokenizer of {folder} has {enc.n_vocab} ids, more than the vocabulary of {vocab}")
    return encode_documents(enc, read_texts(source))


def score_run(job: Job, results: Path, texts: Mapping[str, Path | None]) -> dict[str, float]:
    """The finished run's perplexity per source name, scoring (and recording) those not yet scored."""
    import torch

    from lab.eval.run_weights import load_run_model
    from lab.train.data import seq_len, vocab_size

    root = run_dir_for(job.run_id, results=results).root
    path = root / RESULTS_FILE
    saved = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    sources = _sources(job, texts)
    step = job.cfg.train.max_steps

    def current(name: str) -> bool:
        entry = saved.get(name)
        return entry is not None and entry.get("step") == step and entry.get("source") == str(sources[name])

    missing = [name for name in sources if not current(name)]
    if missing:
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        loaded = load_run_model(root, "last", device)
        length, folder = seq_len(job.cfg), Path(job.cfg.data.path)
        for name in missing:
            tokens = _tokens(name, sources[name], folder, vocab_size(job.cfg))
            result = stream_nll(loaded.model, tokens, length, name, device=device)
            record(root, [result], step=loaded.step, seq_len=length, source=str(sources[name]))
        saved = json.loads(path.read_text(encoding="utf-8"))
    return {name: float(saved[name]["ppl"]) for name in sources}


def summary_rows(jobs: Sequence[Job], runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """table.csv's rows: one per table row of the plan, in the plan's order."""
    from lab.reproduce.fineweb import ROW_BY_NAME, SOURCES

    planned: dict[str, int] = {}
    for job in jobs:
        planned[job.cfg.mixer] = planned.get(job.cfg.mixer, 0) + 1
    table = []
    for name, count in planned.items():
        row = ROW_BY_NAME[name]
        mine = [r for r in runs if r["job"].cfg.mixer == name]
        record_: dict[str, Any] = {"row": name, "model": row.label, "runs": len(mine), "planned": count,
                                   "params": mine[0]["registry"]["n_params"] if mine else None,
                                   "seeds": " ".join(str(r["seed"]) for r in mine),
                                   "run_ids": " ".join(r["job"].run_id for r in mine)}
        for source, column in SOURCES:
            record_[f"paper_{column}"] = getattr(row.paper, column) if row.paper else None
            values = [r["ppl"][source] for r in mine if source in r["ppl"]]
            record_[f"{column}_mean"], record_[f"{column}_std"] = mean_std(values)
        table.append(record_)
    return table


def settings_sentence(jobs: Sequence[Job], texts: Mapping[str, Path | None]) -> str:
    """The settings the runs of a plan share and what they were scored on."""
    cfg = jobs[0].cfg
    m, t, d, o = cfg.model, cfg.train, cfg.data, cfg.optim
    seeds = sorted({j.cfg.train.seed for j in jobs})
    scored = ", ".join(f"{name} ({path})" for name, path in texts.items() if path is not None)
    return (f"Lab preset `{cfg.preset}` with: d_model {m.d_model}, {m.n_layers} layers, {m.n_heads} heads; {t.max_steps} "
            f"steps of {t.batch_size} rows of {d.seq_len} tokens, lr {o.lr:g} (warm-up {o.warmup_steps}, cosine), "
            f"precision {t.precision}; shards {d.path}; seeds {', '.join(map(str, seeds))}. Scored: the shards' "
            f"val split{', ' + scored if scored else ''}; a missing file leaves its column empty.")


def render_markdown(jobs: Sequence[Job], table: list[dict[str, Any]], runs: list[dict[str, Any]], command: str,
                    texts: Mapping[str, Path | None]) -> str:
    """table.md: provenance, settings, then ours beside the paper's."""
    lines = [
        "# FineWeb-Edu language modelling: perplexity (the paper's §5.1 table)",
        "",
        provenance_sentence(jobs, runs, command),
        "",
        settings_sentence(jobs, texts),
        "",
        ("Perplexity (lower is better) of each run's last weights: exp of the token-mean negative log-likelihood "
         "over consecutive non-overlapping windows of the training row length (every token after the first is "
         "predicted once). Ours: mean ± standard deviation over seeds; (paper): the paper's table. LAMBADA here "
         "is the perplexity of whole passages, not of their last word alone."),
        "",
    ]
    header = ["Model", "Params", "Runs"]
    for _, title in COLUMNS:
        header += [f"{title} (paper)", title]
    body = []
    for r in table:
        cells = [r["model"], format_params(r["params"]), f"{r['runs']}/{r['planned']}"]
        for column, _ in COLUMNS:
            paper = r[f"paper_{column}"]
            cells += ["—" if paper is None else f"{paper:.2f}", format_cell(r[f"{column}_mean"], r[f"{column}_std"], 2)]
        body.append(cells)
    lines.append(markdown_table(header, body))
    lines.append("The numbers above, with run ids: `table.csv`; each run's scores: `perplexity.json` in its folder.\n")
    return "\n".join(lines)


def write_tables(jobs: Sequence[Job], results: Path, out: Path, command: str,
                 texts: Mapping[str, Path | None] | None = None) -> int:
    """Score the finished runs of `jobs` not yet scored, write table.md and table.csv to `out`; return
    how many runs are finished."""
    texts = dict(texts or {})
    runs = finished_runs(jobs, results)
    for run in runs:
        run["ppl"] = score_run(run["job"], results, texts)
    table = summary_rows(jobs, runs)
    atomic_write_text(out / "table.md", render_markdown(jobs, table, runs, command, texts))
    frame = pd.DataFrame(table)
    frame["params"] = frame["params"].astype("Int64")
    atomic_write_text(out / "table.csv", frame.to_csv(index=False))
    return len(runs)
