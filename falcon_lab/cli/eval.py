"""`lab eval`: evaluate a trained run."""

from pathlib import Path
from typing import Annotated, Any

import typer

app = typer.Typer(help="Evaluate trained runs: addition extrapolation accuracy, perplexity, LAMBADA last-word "
                        "accuracy, lm-evaluation-harness tasks.")



def run_tokenizer(cfg: Any, tokenizer: Path | None, folder: Path | None, missing: str) -> Any:
    """The tokenizer a run's text is read with: `tokenizer` if given, else the one the shard manifest in `folder`
    names. ValueError (`missing` when there is neither) when it has more ids than the run's vocabulary."""
    from falcon_lab.train.data import vocab_size
    from falcon_lab.tasks.fineweb import load_tokenizer, read_manifest

    if tokenizer is None:
        manifest = read_manifest(folder) if folder is not None else None
        if manifest is None:
            raise ValueError(missing)
        tokenizer = Path(manifest["settings"]["tokenizer"])
    enc = load_tokenizer(tokenizer)
    if enc.n_vocab > vocab_size(cfg):
        raise ValueError(f"tokenizer {tokenizer} has {enc.n_vocab} ids, more than the run's vocabulary of "
                         f"{vocab_size(cfg)}")
    return enc


def val_name(folder: Path) -> str:
    """The name perplexity.json gives a shard folder's val shard: the folder's name, then `-val`
    (data/fineweb-edu -> fineweb-edu-val, data/debian-docs -> debian-docs-val), so it names the data scored."""
    return f"{Path(folder).resolve().name or 'shards'}-val"


def columns(val: range, held_out: range) -> tuple[tuple[str, str], ...]:
    """(summary key, title) of the row printed, for a run's validation and held-out widths."""
    v, o = f"{val.start}–{val.stop - 1}", f"{held_out.start}–{held_out.stop - 1}"
    first, last = held_out.start, held_out.stop - 1
    return (("val_acc", f"Val. acc. {v}"), ("ood_mean", f"Mean {o}"), (f"acc@{first}", f"Acc@{first}"),
            (f"acc@{last}", f"Acc@{last}"), ("free_val_acc", f"Free-running val. acc. {v}"),
            ("free_ood_mean", f"Free-running mean {o}"), ("val_token_acc", f"Per-token val. acc. {v}"),
            ("ood_token_mean", f"Per-token mean {o}"))


@app.command()
def addition(
    run: Annotated[Path, typer.Option("--run", help="Run folder to evaluate.")],
    which: Annotated[str | None, typer.Option(
        help="best (the best step's weights), last (the last checkpoint's; with train.ema their moving average), "
             "raw (the last checkpoint's trained weights, not averaged) or failed (the weights of a run that "
             "failed on a non-finite loss, at the failure); default best, or the last weights, with a note, for a "
             "run that has no best ones.")] = None,
    per_n: Annotated[int, typer.Option(
        help="Teacher-forced samples per operand width n (the run's eval.widths, 1-48 by default).")] = 100,
    free_per_n: Annotated[int, typer.Option(help="Free-running (greedy) samples per width; 0 skips them.")] = 10,
    seed: Annotated[int, typer.Option(help="Seed of the evaluation samples (runs evaluate with 0).")] = 0,
    positions: Annotated[Path | None, typer.Option(
        help="Also write the teacher-forced accuracy of every target position of every width evaluated to this "
             "CSV (`lab plot positions` draws it): where answers break past the trained widths.")] = None,
    abacus_offset: Annotated[int | None, typer.Option(
        help="Digit positions (model.abacus): evaluate at this fixed offset, one of 0..model.abacus seen in "
             "training, instead of the run's eval.abacus_offset.")] = None,
) -> None:
    """Teacher-forced, per-token and free-running accuracy of a run on its evaluation widths (eval.widths: 1-48
    held out from 33 on by default), as a row of the table."""
    import torch

    from falcon_lab.config import ConfigError
    from falcon_lab.eval.addition import evaluate_addition, summarise_widths
    from falcon_lab.eval.callback import eval_widths
    from falcon_lab.eval.free_running import free_running_accuracy
    from falcon_lab.eval.run_weights import WHICH, load_run_model

    if which is not None and which not in WHICH:
        typer.echo(f"lab eval: --which {which!r} is not accepted; accepted: {', '.join(WHICH)}", err=True)
        raise typer.Exit(code=2)
    if per_n < 1 or free_per_n < 0:
        typer.echo(f"lab eval: --per-n must be >= 1 and --free-per-n >= 0, got {per_n} and {free_per_n}", err=True)
        raise typer.Exit(code=2)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        loaded = load_run_model(run, which or "best", device, abacus_offset, fall_back=which is None)
    except (ValueError, ConfigError) as err:
        typer.echo(f"lab eval: {err}", err=True)
        raise typer.Exit(code=2) from None
    if which is None and loaded.which == "last":
        typer.echo(f"lab eval: note: run {run} has no best weights (they are written by runs that evaluate "
                   f"addition, eval.enabled); evaluating its last ones, {loaded.source.name} at step {loaded.step}",
                   err=True)
    which = loaded.which
    if loaded.cfg.task != "addition":
        typer.echo(f"lab eval: run {run} trained task {loaded.cfg.task!r}; accepted: addition", err=True)
        raise typer.Exit(code=2)
    val, held_out = eval_widths(loaded.cfg)
    summary = evaluate_addition(loaded.model, n_per_length=per_n, seed=seed, val_widths=val, ood_widths=held_out,
                                device=device).summary()
    if free_per_n:
        free = summarise_widths(free_running_accuracy(loaded.model, n_per_length=free_per_n, seed=seed,
                                                      val_widths=val, ood_widths=held_out, device=device),
                                val, held_out)
        summary.update(free_val_acc=free["val_acc"], free_ood_mean=free["ood_mean"])
    titles = columns(val, held_out)
    # the widths trained on beside the validation widths, which the evaluation settings choose and may exceed them
    lo, hi = loaded.cfg.data.widths
    cells = [loaded.cfg.mixer, str(loaded.step), f"{lo}–{hi}"]
    cells += ["—" if summary.get(key) is None else f"{summary[key]:.1f}" for key, _ in titles]
    at = loaded.cfg.eval.abacus_offset
    offset = f"; digit positions at offset {at}" if loaded.cfg.model.abacus is not None else ""
    typer.echo(f"{run} ({which} weights: {loaded.source.name}, step {loaded.step}; {per_n} samples per width, "
               f"{free_per_n} free-running{offset})")
    typer.echo("| " + " | ".join(["Mixer", "Step", "Trained widths", *(title for _, title in titles)]) + " |")
    typer.echo("| " + " | ".join(["---"] * len(cells)) + " |")
    typer.echo("| " + " | ".join(cells) + " |")
    if positions is not None:
        import pandas as pd

        from falcon_lab.eval.addition import position_accuracy, position_rows
        from falcon_lab.runs import atomic_write_text

        extra = {} if loaded.cfg.model.abacus is None else {"abacus_offset": at}
        widths = range(val.start, held_out.stop)
        rows = position_rows(position_accuracy(loaded.model, widths=widths, n_per_length=per_n, seed=seed,
                                               device=device, held_out_from=held_out.start),
                             run=str(run), which=which, step=loaded.step, samples=per_n, **extra)
        atomic_write_text(positions, pd.DataFrame(rows).to_csv(index=False))
        typer.echo(f"positions: {positions}")


@app.command()
def ppl(
    run: Annotated[Path, typer.Option("--run", help="Run folder to evaluate (its last checkpoint).")],
    shards: Annotated[Path | None, typer.Option(
        help="Folder of token shards whose val shard to score; default: the run's data.path (without --text).")]
    = None,
    text: Annotated[list[Path] | None, typer.Option(
        help="Local text file to score (repeatable): .jsonl with a 'text' field per record (LAMBADA), "
             "or plain text as one document (WikiText-103).")] = None,
    tokenizer: Annotated[Path | None, typer.Option(
        help="The .tiktoken file for --text; default: the one recorded in the shard folder's manifest.")] = None,
    seq_len: Annotated[int | None, typer.Option(help="Window length; default: the run's data.seq_len.")] = None,
    max_tokens: Annotated[int | None, typer.Option(help="Score at most this many tokens per source.")] = None,
    batch_size: Annotated[int, typer.Option(help="Windows per forward pass.")] = 8,
) -> None:
    """Perplexity of a run's weights in non-overlapping windows: token-weighted mean NLL, then exp.
    Prints one line per source and merges them into <run>/perplexity.json, the val shard under its folder's
    name (`<folder>-val`), each --text file under its stem."""
    import numpy as np
    import torch

    from falcon_lab.config import ConfigError
    from falcon_lab.eval.perplexity import read_texts, record, stream_nll
    from falcon_lab.eval.run_weights import load_run_model
    from falcon_lab.train.data import seq_len as run_seq_len
    from falcon_lab.train.data import vocab_size
    from falcon_lab.tasks.fineweb import (
        encode_documents,
        find_shards,
        read_shard,
    )

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        loaded = load_run_model(run, "last", device)
        cfg = loaded.cfg
        length = seq_len if seq_len is not None else run_seq_len(cfg)
        folder = shards if shards is not None else (Path(cfg.data.path) if cfg.data.path else None)
        sources = []
        if shards is not None or not text:
            if folder is None:
                raise ValueError(f"run {run} has no data.path; give --shards DIR or --text FILE")
            tokens = np.concatenate([read_shard(p, vocab_size(cfg)) for p in find_shards(folder, "val")])
            sources.append((val_name(folder), str(folder), tokens))
        if text:
            enc = run_tokenizer(cfg, tokenizer, folder,
                                "--text needs --tokenizer FILE.tiktoken (no shard manifest names one)")
            for path in text:
                sources.append((path.stem, str(path), encode_documents(enc, read_texts(path))))
        results = [stream_nll(loaded.model, tokens, length, name, max_tokens, batch_size, device)
                   for name, _, tokens in sources]
    except (ValueError, ConfigError) as err:
        typer.echo(f"lab eval ppl: {err}", err=True)
        raise typer.Exit(code=2) from None
    for result, (_, where, _) in zip(results, sources):
        typer.echo(f"{result.name}: ppl {result.ppl:.4f}  (nll {result.nll:.4f} nats/token over {result.tokens} "
                   f"tokens, windows of {length}; {where})")
    path = record(run, results, step=loaded.step, seq_len=length, weights=loaded.source.name,
                  tokenizer=None if tokenizer is None else str(tokenizer))
    typer.echo(f"{run}: step {loaded.step}; wrote {path}")


@app.command()
def lambada(
    run: Annotated[Path, typer.Option("--run", help="Run folder to evaluate (its last checkpoint).")],
    file: Annotated[Path, typer.Option("--file", help="LAMBADA file: .jsonl with a 'text' field per record.")],
    tokenizer: Annotated[Path | None, typer.Option(
        help="The .tiktoken file; default: the one recorded in the manifest of the run's data.path.")] = None,
    max_examples: Annotated[int | None, typer.Option(help="Score only the first N records.")] = None,
    max_len: Annotated[int | None, typer.Option(
        help="Positions the model reads per example (the context is left-truncated); default: data.seq_len.")]
    = None,
    batch_size: Annotated[int, typer.Option(help="Examples per forward pass.")] = 8,
) -> None:
    """LAMBADA last-word accuracy (every token of the last word is the argmax given the true prefix) and
    last-word perplexity. Prints one line and merges it into <run>/lambada.json."""
    import torch

    from falcon_lab.config import ConfigError
    from falcon_lab.eval.lambada import encode_examples, last_word_scores, record
    from falcon_lab.eval.perplexity import read_texts
    from falcon_lab.eval.run_weights import load_run_model
    from falcon_lab.train.data import seq_len as run_seq_len

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        if max_examples is not None and max_examples < 1:
            raise ValueError(f"--max-examples must be >= 1, got {max_examples}")
        loaded = load_run_model(run, "last", device)
        cfg = loaded.cfg
        length = max_len if max_len is not None else run_seq_len(cfg)
        enc = run_tokenizer(cfg, tokenizer, Path(cfg.data.path) if cfg.data.path else None,
                            "give --tokenizer FILE.tiktoken (the run's data.path has no manifest naming one)")
        texts = read_texts(file)[:max_examples]
        result = last_word_scores(loaded.model, encode_examples(enc, texts, file.name), length, "lambada",
                                  batch_size, device)
    except (ValueError, ConfigError) as err:
        typer.echo(f"lab eval lambada: {err}", err=True)
        raise typer.Exit(code=2) from None
    typer.echo(f"lambada: accuracy {result.accuracy:.2f}% ({result.correct}/{result.examples}), last-word ppl "
               f"{result.ppl:.4f} (nll {result.nll:.4f} nats/token over {result.tokens} tokens, at most {length} "
               f"positions; {file})")
    path = record(run, [result], step=loaded.step, max_len=length, weights=loaded.source.name, source=str(file),
                  tokenizer=str(tokenizer), max_examples=max_examples)
    typer.echo(f"{run}: step {loaded.step}; wrote {path}")


@app.command()
def harness(
    run: Annotated[Path, typer.Option("--run", help="Run folder to evaluate (its last checkpoint).")],
    tasks: Annotated[str, typer.Option(
        help="lm-evaluation-harness tasks, comma-separated (e.g. lambada_openai,hellaswag,arc_easy); their data "
             "must be in the local HF datasets cache, or local files named by YAML tasks under --include-path.")],
    num_fewshot: Annotated[int | None, typer.Option(help="Examples in the prompt; default: each task's own.")] = None,
    limit: Annotated[int | None, typer.Option(help="Score only the first N documents of each task.")] = None,
    include_path: Annotated[Path | None, typer.Option(help="Folder of YAML task definitions of your own.")] = None,
    tokenizer: Annotated[Path | None, typer.Option(
        help="The .tiktoken file; default: the one recorded in the manifest of the run's data.path.")] = None,
    max_len: Annotated[int | None, typer.Option(
        help="Positions the model reads per request (contexts are left-truncated); default: data.seq_len.")] = None,
    batch_size: Annotated[int, typer.Option(help="Requests per forward pass.")] = 8,
    bootstrap_iters: Annotated[int, typer.Option(help="Resamples for the standard errors; 0 skips them.")] = 100_000,
    seed: Annotated[int, typer.Option(help="Seed of lm-eval's few-shot sampling and shuffles.")] = 0,
) -> None:
    """Score a run on lm-evaluation-harness tasks, offline (pip install 'falcon-lab[eval]'). Prints lm-eval's
    table and merges each task's metrics into <run>/harness.json."""
    from falcon_lab.eval.harness import MISSING, lm_eval_version, offline

    offline()  # before anything imports `datasets`: task data comes from local files only
    names = [t.strip() for t in tasks.split(",") if t.strip()]
    if not names:
        typer.echo(f"lab eval harness: --tasks {tasks!r} names no task; accepted: NAME[,NAME...]", err=True)
        raise typer.Exit(code=2)
    version = lm_eval_version()
    if version is None:
        typer.echo(f"lab eval harness: {MISSING}", err=True)
        raise typer.Exit(code=2)
    import torch

    from falcon_lab.config import ConfigError
    from falcon_lab.eval.harness import RunLM, evaluate, record, task_metrics
    from falcon_lab.eval.run_weights import load_run_model
    from falcon_lab.train.data import seq_len as run_seq_len

    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        for option, value in (("--num-fewshot", num_fewshot), ("--limit", limit)):
            if value is not None and value < (0 if option == "--num-fewshot" else 1):
                raise ValueError(f"{option} must be >= {0 if option == '--num-fewshot' else 1}, got {value}")
        if include_path is not None and not include_path.is_dir():
            raise ValueError(f"--include-path {include_path} is not a folder")
        loaded = load_run_model(run, "last", device)
        cfg = loaded.cfg
        length = max_len if max_len is not None else run_seq_len(cfg)
        enc = run_tokenizer(cfg, tokenizer, Path(cfg.data.path) if cfg.data.path else None,
                            "give --tokenizer FILE.tiktoken (the run's data.path has no manifest naming one)")
        scorer = RunLM(loaded.model, enc, length, batch_size, device)
        results = evaluate(scorer, names, num_fewshot, limit, include_path, seed, bootstrap_iters)
    except (ValueError, ConfigError) as err:
        typer.echo(f"lab eval harness: {err}", err=True)
        raise typer.Exit(code=2) from None
    except OSError as err:  # datasets' ConnectionError in offline mode among them
        typer.echo(f"lab eval harness: a task's data is not available offline ({type(err).__name__}: {err}); "
                   f"accepted: datasets already in the HF datasets cache (HF_DATASETS_CACHE), or YAML tasks on "
                   f"local files through --include-path", err=True)
        raise typer.Exit(code=1) from None
    from lm_eval.utils import make_table

    typer.echo(make_table(results))
    path = record(run, task_metrics(results), step=loaded.step, weights=loaded.source.name, max_len=length,
                  num_fewshot=num_fewshot, limit=limit, tokenizer=str(tokenizer), lm_eval=version,
                  include_path=None if include_path is None else str(include_path))
    typer.echo(f"{run}: step {loaded.step}; wrote {path}")
