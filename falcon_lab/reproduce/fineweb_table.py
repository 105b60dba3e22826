"""The FineWeb-Edu table from finished runs: each run's perplexities, then table.md and table.csv.

A finished run is scored once, with its last weights, in non-overlapping windows of its own row
length (falcon_lab.eval.perplexity): the val split of its shard folder, and the local WikiText-103 and
LAMBADA files when given (tokenised with the tokenizer the shard manifest names). LAMBADA is also
scored the standard zero-shot way (falcon_lab.eval.lambada): last-word accuracy and last-word perplexity,
what "LAMBADA perplexity" usually means in this literature. The scores live in the run's perplexity.json and
lambada.json, so rewriting the table rescores nothing. Ours are mean ± sample standard deviation
over the seeds of a row.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from falcon_lab.eval import lambada as last_word
from falcon_lab.eval.perplexity import RESULTS_FILE, read_texts, record, stream_nll
from falcon_lab.eval.run_weights import load_run_model
from falcon_lab.reproduce.addition_table import (
    finished_runs,
    format_cell,
    format_params,
    markdown_table,
    mean_std,
    provenance_sentence,
    row_groups,
)
from falcon_lab.reproduce.fineweb_rows import ROW_BY_NAME, SOURCES
from falcon_lab.reproduce.jobs import Job
from falcon_lab.runs import atomic_write_text, run_dir_for
from falcon_lab.train.data import seq_len, vocab_size

if TYPE_CHECKING:
    import tiktoken

# (table.csv column, table.md title, the paper's column beside it, decimals). The paper does not say
# which LAMBADA perplexity it reports; the standard zero-shot one is of the last word, so its number
# stands beside ours of the last word.
COLUMNS = (("wiki", "Wiki", "wiki", 2), ("lambada_word", "LAMBADA", "lambada", 2),
           ("lambada_acc", "LAMBADA acc. %", None, 1), ("lambada", "LAMBADA passage", None, 2),
           ("fineweb", "FineWeb-Edu", "fineweb", 2))


def _sources(job: Job, texts: Mapping[str, Path | None]) -> dict[str, Path]:
    """What a run is scored on: name -> file or shard folder."""
    wanted = {"fineweb-edu-val": Path(job.cfg.data.path).resolve(), **texts}
    return {name: Path(wanted[name]) for name, _ in SOURCES if wanted.get(name) is not None}


def _tokenizer(source: Path, folder: Path, vocab: int) -> tiktoken.Encoding:
    from falcon_lab.tasks.fineweb import load_tokenizer, read_manifest

    manifest = read_manifest(folder)
    if manifest is None:
        raise ValueError(f"shard folder {folder} has no manifest naming its tokenizer, needed for {source}")
    enc = load_tokenizer(manifest["settings"]["tokenizer"])
    if enc.n_vocab > vocab:
        raise ValueError(f"tokenizer of {folder} has {enc.n_vocab} ids, more than the vocabulary of {vocab}")
    return enc


def _tokens(name: str, source: Path, folder: Path, vocab: int) -> np.ndarray:
    from falcon_lab.tasks.fineweb import encode_documents, find_shards, read_shard

    if name == "fineweb-edu-val":
        return np.concatenate([read_shard(p, vocab) for p in find_shards(source, "val")])
    return encode_documents(_tokenizer(source, folder, vocab), read_texts(source))


def score_run(job: Job, results: Path, texts: Mapping[str, Path | None]) -> dict[str, float]:
    """The finished run's perplexity per source name, scoring (and recording) those not yet scored."""
    import torch

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


def score_last_word(job: Job, results: Path, source: Path) -> dict[str, float]:
    """The finished run's LAMBADA last-word accuracy (%) and perplexity, scoring (and recording) them
    unless lambada.json holds them for this step and file."""
    import torch

    root = run_dir_for(job.run_id, results=results).root
    path = root / last_word.RESULTS_FILE
    saved = json.loads(path.read_text(encoding="utf-8")) if path.exists() else {}
    entry = saved.get("lambada")
    step = job.cfg.train.max_steps
    if entry is None or entry.get("step") != step or entry.get("source") != str(source):
        device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        loaded = load_run_model(root, "last", device)
        length, folder = seq_len(job.cfg), Path(job.cfg.data.path)
        examples = last_word.encode_examples(_tokenizer(source, folder, vocab_size(job.cfg)), read_texts(source),
                                             source.name)
        result = last_word.last_word_scores(loaded.model, examples, length, "lambada", device=device)
        last_word.record(root, [result], step=loaded.step, max_len=length, source=str(source))
        entry = json.loads(path.read_text(encoding="utf-8"))["lambada"]
    return {"lambada_acc": float(entry["accuracy"]), "lambada_word": float(entry["ppl"])}


def summary_rows(jobs: Sequence[Job], runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """table.csv's rows: one per table row of the plan, in the plan's order."""
    table = []
    for row, mine, record_ in row_groups(jobs, runs, ROW_BY_NAME):
        record_["run_ids"] = " ".join(r["job"].run_id for r in mine)
        for source, column in SOURCES:
            record_[f"paper_{column}"] = getattr(row.paper, column) if row.paper else None
            values = [r["ppl"][source] for r in mine if source in r["ppl"]]
            record_[f"{column}_mean"], record_[f"{column}_std"] = mean_std(values)
        for column in ("lambada_acc", "lambada_word"):
            values = [r["last_word"][column] for r in mine if r.get("last_word")]
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
            f"steps of {t.batch_size} rows of {d.seq_len} tokens, lr {o.lr:g} ({o.schedule()}), "
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
         "predicted once). LAMBADA is the zero-shot last-word measure: each passage split at its last space, "
         "the model reads EOT + context (left-truncated to the row length); LAMBADA: perplexity of the last "
         "word's tokens; LAMBADA acc. %: share of passages whose every last-word token is the argmax given the "
         "true prefix; LAMBADA passage: perplexity of the whole passages. Ours: mean ± standard deviation over "
         "seeds; (paper): the paper's table."),
        "",
    ]
    header = ["Model", "Params", "Runs"]
    for _, title, paper_column, _ in COLUMNS:
        header += [f"{title} (paper)", title] if paper_column else [title]
    body = []
    for r in table:
        cells = [r["model"], format_params(r["params"]), f"{r['runs']}/{r['planned']}"]
        for column, _, paper_column, decimals in COLUMNS:
            if paper_column:
                paper = r[f"paper_{paper_column}"]
                cells.append("—" if paper is None else f"{paper:.2f}")
            cells.append(format_cell(r[f"{column}_mean"], r[f"{column}_std"], decimals))
        body.append(cells)
    lines.append(markdown_table(header, body))
    lines.append("The numbers above, with run ids: `table.csv`; each run's scores: `perplexity.json` and "
                 "`lambada.json` in its folder.\n")
    return "\n".join(lines)


def write_tables(jobs: Sequence[Job], results: Path, out: Path, command: str,
                 texts: Mapping[str, Path | None] | None = None) -> int:
    """Score the finished runs of `jobs` not yet scored, write table.md and table.csv to `out`; return
    how many runs are finished."""
    texts = dict(texts or {})
    runs = finished_runs(jobs, results)
    for run in runs:
        run["ppl"] = score_run(run["job"], results, texts)
        if texts.get("lambada") is not None:
            run["last_word"] = score_last_word(run["job"], results, Path(texts["lambada"]))
    table = summary_rows(jobs, runs)
    atomic_write_text(out / "table.md", render_markdown(jobs, table, runs, command, texts))
    frame = pd.DataFrame(table)
    frame["params"] = frame["params"].astype("Int64")
    atomic_write_text(out / "table.csv", frame.to_csv(index=False))
    return len(runs)
