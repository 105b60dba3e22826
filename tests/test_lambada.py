"""LAMBADA last-word scoring: splitting and tokenising on the synthetic tokenizer; an oracle model scores
100%, one wrong on the last token 0%; a hand-computed last-word perplexity; padding and left-truncation
change nothing; `lab eval lambada` and the columns of the tiny FineWeb table."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import pandas as pd
import pytest
import torch
from torch import nn
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.eval.lambada import Example, encode_examples, last_word_scores, split_last_word
from falcon_lab.mixers import LanguageModel
from falcon_lab.mixers.model import LMConfig
from falcon_lab.tasks.fineweb import build_shards, load_tokenizer
from tests.fineweb_util import documents, write_parquet, write_rank_file

ANSI = re.compile(r"\x1b\[[0-9;]*m")
VOCAB = 320  # covers the synthetic tokenizer's 265 ids
TEXTS = ["the thing in the weather", "it's the other ring", "éclair 42 the thing", "in other weather thing"]


class Oracle(nn.Module):
    """Knows the full token sequences; at each position puts its logit peak on the true next token
    (or, with `wrong_last`, one past it on each sequence's final token)."""

    def __init__(self, examples: list[Example], vocab: int, wrong_last: bool = False) -> None:
        super().__init__()
        self.sequences = [[*e.context, *e.target] for e in examples]
        self.vocab, self.wrong_last = vocab, wrong_last

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        logits = torch.zeros(*ids.shape, self.vocab)
        for b, row in enumerate(ids.tolist()):
            # The longest known sequence whose (left-truncated) tail starts the row.
            match = max(((s, start) for s in self.sequences for start in range(len(s))
                         if s[start:len(s) - 1] == row[:len(s) - 1 - start]), key=lambda m: len(m[0]) - m[1])
            seq, start = match
            for t in range(len(seq) - 1 - start):
                nxt = seq[start + t + 1]
                if self.wrong_last and start + t + 1 == len(seq) - 1:
                    nxt = (nxt + 1) % self.vocab
                logits[b, t, nxt] = 10.0
        return logits


class Fixed(nn.Module):
    """The same next-token log-probabilities at every position."""

    def __init__(self, logp: torch.Tensor) -> None:
        super().__init__()
        self.logp = logp

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.logp.expand(*ids.shape, -1).clone()


@pytest.fixture(scope="module")
def enc(tmp_path_factory):
    return load_tokenizer(write_rank_file(tmp_path_factory.mktemp("tok") / "tiny.tiktoken"))


def test_split_and_encode(enc):
    assert split_last_word("the thing in the weather") == ("the thing in the", " weather")
    examples = encode_examples(enc, TEXTS)
    first = examples[0]
    assert first.context[0] == enc.eot_token
    assert enc.decode(list(first.context[1:])) == "the thing in the"
    assert enc.decode(list(first.target)) == " weather" and len(first.target) > 1
    for bad in ("weather", "weather ", " weather"):
        with pytest.raises(ValueError, match="lambada record 2 needs a context, a space and a last word"):
            encode_examples(enc, ["a b", bad])


def test_oracle_scores_all_and_wrong_last_token_none(enc):
    examples = encode_examples(enc, TEXTS)
    right = last_word_scores(Oracle(examples, VOCAB), examples, max_len=64, batch_size=3)
    assert (right.correct, right.examples, right.accuracy) == (4, 4, 100.0)
    assert right.tokens == sum(len(e.target) for e in examples)
    wrong = last_word_scores(Oracle(examples, VOCAB, wrong_last=True), examples, max_len=64, batch_size=3)
    assert (wrong.correct, wrong.accuracy) == (0, 0.0)
    assert wrong.ppl > right.ppl
    # Left-truncated to 7 positions the oracle still sees the prefix it knows and stays right.
    short = last_word_scores(Oracle(examples, VOCAB), examples, max_len=7, batch_size=2)
    assert short.accuracy == 100.0 and short.tokens == right.tokens


def test_last_word_perplexity_by_hand():
    logp = torch.log_softmax(torch.tensor([0.0, 1.0, 2.0, 0.5]), -1)
    example = Example(context=(3, 0), target=(2, 1))
    result = last_word_scores(Fixed(logp), [example], max_len=8)
    p = [math.exp(v) for v in (0.0, 1.0, 2.0, 0.5)]
    nll = -(math.log(p[2] / sum(p)) + math.log(p[1] / sum(p))) / 2
    assert result.tokens == 2 and result.nll == pytest.approx(nll) and result.ppl == pytest.approx(math.exp(nll))
    # Token 2 is the argmax but token 1 is not: the word is wrong.
    assert result.correct == 0
    assert last_word_scores(Fixed(logp), [Example((0,), (2, 2))], max_len=8).correct == 1
    with pytest.raises(ValueError, match="a last word of 2 tokens does not fit a context length of 1"):
        last_word_scores(Fixed(logp), [example], max_len=1)


@pytest.mark.parametrize("mixer", ["transformer", "falcon-1a"])
def test_padding_and_truncation_are_exact(enc, mixer):
    torch.manual_seed(0)
    model = LanguageModel(LMConfig(vocab_size=VOCAB, d_model=32, n_layers=1, n_heads=2, mixer=mixer)).eval()
    examples = encode_examples(enc, TEXTS)
    batched = last_word_scores(model, examples, max_len=64, batch_size=4)
    one = [last_word_scores(model, [e], max_len=64, batch_size=1) for e in examples]
    assert batched.correct == sum(r.correct for r in one)
    assert batched.nll_sum == pytest.approx(sum(r.nll_sum for r in one), rel=1e-5)
    # max_len L reads the last L tokens of context + target (less the final one), as if only they existed.
    cut = [Example(tuple([*e.context, *e.target][:-1][-8:]), e.target) for e in examples]
    cut = [Example(c.context[:len(c.context) - len(c.target) + 1], c.target) for c in cut]
    truncated = last_word_scores(model, examples, max_len=8, batch_size=4)
    assert truncated.nll_sum == pytest.approx(last_word_scores(model, cut, max_len=64).nll_sum, rel=1e-5)


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fineweb")
    ranks = write_rank_file(root / "tiny.tiktoken")
    build_shards([write_parquet(root / "a.parquet", documents(150))], ranks, root / "shards",
                 shard_tokens=1500, val_tokens=400)
    return root / "shards"


def test_cli_and_fineweb_table_columns(shards, tmp_path):
    lambada = tmp_path / "lambada.jsonl"
    lambada.write_text("".join(json.dumps({"text": t}) + "\n" for t in documents(5, seed=5)))
    args = ["reproduce", "fineweb", "--preset", "tiny", "--rows", "transformer", "--max-steps", "2",
            "--set", f"data.vocab_size={VOCAB}", "--set", "data.seq_len=16", "--set", "train.batch_size=4",
            "--data", str(shards), "--lambada", str(lambada), "--results", str(tmp_path), "--gpus", "1"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    out = tmp_path / "fineweb" / "tiny"
    row = pd.read_csv(out / "table.csv").set_index("row").loc["transformer"]
    assert 0 <= row["lambada_acc_mean"] <= 100 and math.isfinite(row["lambada_word_mean"])
    assert row["lambada_word_mean"] > 1 and row["lambada_mean"] > 1 and row["paper_lambada"] == 47.43
    md = (out / "table.md").read_text()
    assert "| LAMBADA (paper) | LAMBADA | LAMBADA acc. % | LAMBADA passage |" in md
    run = tmp_path / "runs" / row["run_ids"]
    saved = json.loads((run / "lambada.json").read_text())["lambada"]
    assert saved["ppl"] == pytest.approx(row["lambada_word_mean"]) and saved["examples"] == 5

    # `lab eval lambada` on the same run and file gives the table's numbers.
    code = CliRunner().invoke(app, ["eval", "lambada", "--run", str(run), "--file", str(lambada)])
    text = ANSI.sub("", code.output)
    assert code.exit_code == 0, text
    assert f"accuracy {saved['accuracy']:.2f}% ({saved['correct']}/5)" in text and f"{saved['ppl']:.4f}" in text
    code = CliRunner().invoke(app, ["eval", "lambada", "--run", str(run), "--file", str(lambada),
                                    "--max-examples", "2"])
    assert code.exit_code == 0 and "/2)" in ANSI.sub("", code.output)
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"text": "oneword"}) + "\n")
    code = CliRunner().invoke(app, ["eval", "lambada", "--run", str(run), "--file", str(bad)])
    text = ANSI.sub("", code.output).strip()
    assert code.exit_code == 2 and text.startswith("lab eval lambada: bad.jsonl record 1 needs"), text
