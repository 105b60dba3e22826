"""`lab data`: generate the datasets of the two tracks, and samples of the synthetic tasks."""

from pathlib import Path
from typing import Annotated, NoReturn

import typer

app = typer.Typer(help="Generate the datasets: variable-length addition, FineWeb-Edu token shards (or shards of "
                       "Debian's English documentation, offline), and samples of the synthetic tasks (mqar, parity, "
                       "permutation).")


@app.command()
def addition(
    split: Annotated[str, typer.Option(help="Which split: train, val or ood.")] = "train",
    digits: Annotated[str | None, typer.Option(
        help="Operand widths n as LO-HI or N; default: 1-32 for train and val, 33-48 for ood.")] = None,
    n_per_length: Annotated[int, typer.Option(help="Samples per operand width n.")] = 100,
    seed: Annotated[int, typer.Option(help="Seed; the same seed gives the same data.")] = 0,
    out: Annotated[Path | None, typer.Option(help="jsonl file to write; default <results>/data/addition/<split>.jsonl.")] = None,
) -> None:
    """Write addition problems a+b= with the reversed sum as target, one JSON record per line."""
    from falcon_lab.paths import results_path
    from falcon_lab.tasks.addition import SPLITS, write_jsonl

    try:
        if split not in SPLITS:
            raise ValueError(f"--split {split!r} is not accepted; accepted: {', '.join(SPLITS)}")
        widths = parse_range("--digits", digits) if digits is not None else None
        if n_per_length < 1:
            raise ValueError(f"--n-per-length must be >= 1, got {n_per_length}")
        path = out if out is not None else results_path("data", "addition", f"{split}.jsonl")
        count = write_jsonl(path, split, widths, n_per_length, seed)
    except ValueError as err:
        typer.echo(f"lab data addition: {err}", err=True)
        raise typer.Exit(code=2) from None
    except OSError as err:
        cannot_write("lab data addition", path, err)
    typer.echo(f"wrote {count} {split} records (seed {seed}) to {path}")


@app.command()
def fineweb(
    parquet: Annotated[list[Path], typer.Option(
        help="FineWeb-Edu parquet file, or folder of *.parquet (repeatable; taken in the order given).")],
    tokenizer: Annotated[Path, typer.Option(
        help="GPT-2 BPE ranks as a local .tiktoken file (openai-whisper's whisper/assets/gpt2.tiktoken).")],
    out: Annotated[Path, typer.Option(help="Folder to write uint16 token shards into.")] = Path("data/fineweb-edu"),
    shard_tokens: Annotated[int, typer.Option(help="Tokens per train shard.")] = 100_000_000,
    val_tokens: Annotated[int, typer.Option(help="Tokens of the validation shard (the stream's first).")]
    = 10_000_000,
    min_int_score: Annotated[int | None, typer.Option(help="Keep only documents with int_score >= this.")] = None,
) -> None:
    """Tokenise local FineWeb-Edu parquet with GPT-2 BPE into llm.c-compatible shards (resumable)."""
    from falcon_lab.tasks.fineweb import build_shards

    try:
        manifest = build_shards(parquet, tokenizer, out, shard_tokens, val_tokens, min_int_score, log=typer.echo)
    except ValueError as err:
        typer.echo(f"lab data fineweb: {err}", err=True)
        raise typer.Exit(code=2) from None
    except OSError as err:
        typer.echo(f"lab data fineweb: {err.filename or out}: {err.strerror}", err=True)
        raise typer.Exit(code=1) from None
    typer.echo(f"{out}: {manifest['n_shards']} shards, {manifest['val_tokens']} val and "
               f"{manifest['train_tokens']} train tokens from {manifest['documents']} documents")


@app.command("debian-docs")
def debian_docs(
    tokenizer: Annotated[Path, typer.Option(
        help="GPT-2 BPE ranks as a local .tiktoken file (lab data gpt2-ranks fetches it).")],
    corpus: Annotated[list[str] | None, typer.Option(
        help="Which corpus (repeatable): python-docs (python3.11-doc) or linux-docs (linux-doc-6.1); "
             "default python-docs.")] = None,
    root: Annotated[Path, typer.Option(
        help="Where the package lies: / once installed, or the folder a .deb was unpacked into (dpkg-deb -x).")]
    = Path("/"),
    out: Annotated[Path, typer.Option(help="Folder to write uint16 token shards into.")] = Path("data/debian-docs"),
    shard_tokens: Annotated[int, typer.Option(help="Tokens per train shard.")] = 100_000_000,
    val_tokens: Annotated[int, typer.Option(help="Tokens of the validation shard (the stream's first).")] = 200_000,
) -> None:
    """Tokenise the English documentation of Debian doc packages (real text, offline) into the same shards as
    `lab data fineweb`; documents in a fixed order by the hash of their names, the first VAL_TOKENS for val."""
    from falcon_lab.tasks.fineweb.debian_docs import build_doc_shards

    try:
        manifest = build_doc_shards(corpus or ["python-docs"], tokenizer, out, root, shard_tokens, val_tokens,
                                    log=typer.echo)
    except ValueError as err:
        typer.echo(f"lab data debian-docs: {err}", err=True)
        raise typer.Exit(code=2) from None
    except OSError as err:
        typer.echo(f"lab data debian-docs: {err.filename or out}: {err.strerror}", err=True)
        raise typer.Exit(code=1) from None
    names = ", ".join(f"{s['corpus']} ({s['package'] or 'version unknown'}, {s['licence']})"
                      for s in manifest["settings"]["sources"])
    typer.echo(f"{out}: {manifest['n_shards']} shards, {manifest['val_tokens']} val and "
               f"{manifest['train_tokens']} train tokens from {manifest['documents']} documents of {names}")


@app.command("last-words")
def last_words(
    data: Annotated[Path, typer.Option(help="A shard folder (lab data debian-docs or fineweb): its val shard.")],
    tokenizer: Annotated[Path, typer.Option(help="The .tiktoken file the shards were made with.")],
    out: Annotated[Path | None, typer.Option(help="The .jsonl to write; default DATA/last_words_val.jsonl.")] = None,
    n: Annotated[int | None, typer.Option(help="Keep the first N passages (default all).")] = None,
    min_words: Annotated[int, typer.Option(help="Words of context a passage needs before its last word.")] = 40,
) -> None:
    """LAMBADA-style last-word passages from the val shard (prose paragraphs, last word after all the rest),
    for `lab eval lambada --file`; no human filter, so not LAMBADA's scores (falcon_lab/tasks/fineweb/last_words.py)."""
    from falcon_lab.tasks.fineweb import find_shards, load_tokenizer
    from falcon_lab.tasks.fineweb.last_words import write_last_words

    try:
        shards = find_shards(data, "val")
        if not shards:
            raise ValueError(f"{data}: no val shard (*_val_*.bin)")
        info = write_last_words(shards[0], load_tokenizer(tokenizer), out or data / "last_words_val.jsonl", n,
                                min_words)
    except ValueError as err:
        typer.echo(f"lab data last-words: {err}", err=True)
        raise typer.Exit(code=2) from None
    except OSError as err:
        typer.echo(f"lab data last-words: {err.filename or data}: {err.strerror}", err=True)
        raise typer.Exit(code=1) from None
    typer.echo(f"{info['file']}: {info['passages']} passages of {info['found']} found in {info['shard']}")


@app.command("gpt2-ranks")
def gpt2_ranks(
    out: Annotated[Path, typer.Option(help="Where to write the rank file.")] = Path("data/gpt2.tiktoken"),
    timeout: Annotated[float, typer.Option(help="Seconds to wait for PyPI.")] = 60.0,
) -> None:
    """Fetch GPT-2's BPE rank file from PyPI (openai-whisper's source package, checked by sha256) for
    `lab data fineweb --tokenizer`: the one command that reaches the network, once."""
    from falcon_lab.tasks.fineweb.ranks import fetch_gpt2_ranks

    try:
        path = fetch_gpt2_ranks(out, timeout=timeout)
    except ValueError as err:
        typer.echo(f"lab data gpt2-ranks: {err}", err=True)
        raise typer.Exit(code=2) from None
    except OSError as err:
        typer.echo(f"lab data gpt2-ranks: {err}", err=True)
        raise typer.Exit(code=1) from None
    typer.echo(f"{path}: GPT-2's rank file (sha256 checked)")


def _sequence_data(task_name: str, split: str, lengths: str, n_per_length: int, seed: int, out: Path | None,
                   show: int, **options: object) -> None:
    """Write samples of a synthetic task, `n_per_length` for each length, one JSON record a line; print the
    first `show` (without their token ids)."""
    import json

    from falcon_lab.config import DataConfig
    from falcon_lab.paths import results_path
    from falcon_lab.task import task_of
    from falcon_lab.tasks.synthetic import SPLITS, eval_samples, options_of

    command = f"lab data {task_name}"
    try:
        if split not in SPLITS:
            raise ValueError(f"--split {split!r} is not accepted; accepted: {', '.join(SPLITS)}")
        lo, hi = parse_range("--lengths", lengths)
        if n_per_length < 1:
            raise ValueError(f"--n-per-length must be >= 1, got {n_per_length}")
        try:
            task = task_of(task_name).make(DataConfig(**options))  # type: ignore[arg-type]
        except ValueError as err:
            raise ValueError(f"--{str(err).replace('_', '-')}") from None
        header = {"task": task_name, **options_of(task), "split": split, "seed": seed}
        records = [{**header, **task.record(s)} for n in range(lo, hi + 1)
                   for s in eval_samples(task, split, n, n_per_length, seed)]
    except ValueError as err:
        typer.echo(f"{command}: {err}", err=True)
        raise typer.Exit(code=2) from None
    for record in records[:show]:
        typer.echo(json.dumps({k: v for k, v in record.items() if k not in ("tokens", "labels")}))
    path = out if out is not None else results_path("data", task_name, f"{split}.jsonl")
    from falcon_lab.runs import atomic_write_text

    try:
        atomic_write_text(path, "".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
    except OSError as err:
        cannot_write(command, path, err)
    typer.echo(f"wrote {len(records)} {split} samples (seed {seed}) to {path}")


def cannot_write(command: str, path: Path, err: OSError) -> NoReturn:
    """An output file that cannot be written: one line saying why (the part of its path in the way, where one
    is), exit code 2."""
    from falcon_lab.cli._common import unwritable

    why = unwritable(Path(path).parent) or err.strerror or str(err)
    typer.echo(f"{command}: cannot write {path}: {why}", err=True)
    raise typer.Exit(code=2) from None


def parse_range(option: str, text: str) -> tuple[int, int]:
    """'LO-HI' or 'N' as an inclusive range of positive ints; ValueError naming `option` and the accepted forms."""
    lo, sep, hi = text.partition("-")
    try:
        bounds = (int(lo), int(hi) if sep else int(lo))
    except ValueError:
        raise ValueError(f"{option} {text!r} is not a range; accepted: LO-HI (e.g. 1-32) or N") from None
    if not 1 <= bounds[0] <= bounds[1]:
        raise ValueError(f"{option} {text!r} must satisfy 1 <= LO <= HI")
    return bounds


SplitOption = Annotated[str, typer.Option(help="Which stream: train, val (train lengths) or test (held-out).")]
LengthsOption = Annotated[str, typer.Option(help="Sequence lengths as LO-HI or N.")]
PerLengthOption = Annotated[int, typer.Option(help="Samples per length.")]
SeedOption = Annotated[int, typer.Option(help="Seed; the same seed gives the same data.")]
ShowOption = Annotated[int, typer.Option(help="Print the first SHOW samples.")]
OutOption = Annotated[Path | None, typer.Option(help="jsonl file to write; default <results>/data/<task>/<split>.jsonl.")]


@app.command()
def parity(
    split: SplitOption = "val",
    lengths: LengthsOption = "1-16",
    n_per_length: PerLengthOption = 4,
    seed: SeedOption = 0,
    show: ShowOption = 3,
    out: OutOption = None,
) -> None:
    """Running parity: bit strings, the XOR of the bits so far at every position."""
    _sequence_data("parity", split, lengths, n_per_length, seed, out, show)


@app.command()
def permutation(
    split: SplitOption = "val",
    lengths: LengthsOption = "1-16",
    n_per_length: PerLengthOption = 4,
    seed: SeedOption = 0,
    show: ShowOption = 3,
    group: Annotated[str, typer.Option(help="S5, or A5 (its even permutations).")] = "S5",
    out: OutOption = None,
) -> None:
    """Permutations of five elements composed left to right; the product so far at every position."""
    _sequence_data("permutation", split, lengths, n_per_length, seed, out, show, group=group)


@app.command()
def mqar(
    split: SplitOption = "val",
    lengths: LengthsOption = "16-32",
    n_per_length: PerLengthOption = 4,
    seed: SeedOption = 0,
    show: ShowOption = 3,
    vocab_size: Annotated[int, typer.Option(help="Vocabulary: keys from the lower half, values the upper.")] = 256,
    tokens_per_pair: Annotated[int, typer.Option(help="A sequence of T tokens holds T // this many pairs.")] = 8,
    out: OutOption = None,
) -> None:
    """Multi-query associative recall (zoology): key-value pairs, then each key asked once."""
    _sequence_data("mqar", split, lengths, n_per_length, seed, out, show, vocab_size=vocab_size,
                   tokens_per_pair=tokens_per_pair)


def _length_task_command(name: str, summary: str) -> None:
    """Register `lab data <name>` for a registered task with a length axis that has no command of its own (a
    plugin's task): its samples at the task's default options."""

    def command(split: SplitOption = "val", lengths: LengthsOption = "1-16", n_per_length: PerLengthOption = 4,
                seed: SeedOption = 0, show: ShowOption = 3, out: OutOption = None) -> None:
        _sequence_data(name, split, lengths, n_per_length, seed, out, show)

    command.__doc__ = summary or f"Samples of the task {name}."
    app.command(name=name)(command)


def _register_length_tasks() -> None:
    from falcon_lab.task import LengthTask, tasks

    have = {c.name or c.callback.__name__ for c in app.registered_commands}
    for task in tasks():
        if isinstance(task, LengthTask) and task.name not in have:
            _length_task_command(task.name, task.summary)


_register_length_tasks()
