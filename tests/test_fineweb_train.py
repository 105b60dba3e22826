"""FineWeb-Edu training task and perplexity: batches by (seed, step, rank), `lab train --task fineweb`
on synthetic shards, and `lab eval ppl` against a hand computation."""

from __future__ import annotations

import json
import math
import re
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.config import ConfigError, load_config
from falcon_lab.eval.perplexity import read_texts, stream_nll
from falcon_lab.train.data import train_batch as run_train_batch
from falcon_lab.tasks.fineweb import ShardSet, build_shards, read_shard, train_batch, val_windows, write_shard
from tests.fineweb_util import documents, write_parquet, write_rank_file

ANSI = re.compile(r"\x1b\[[0-9;]*m")
VOCAB = 320  # covers the synthetic tokenizer's 265 ids


def invoke(*args: str) -> tuple[int, str]:
    result = CliRunner().invoke(app, list(args))
    return result.exit_code, ANSI.sub("", result.output)


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("fineweb")
    ranks = write_rank_file(root / "tiny.tiktoken")
    src = write_parquet(root / "a.parquet", documents(150))
    build_shards([src], ranks, root / "shards", shard_tokens=1500, val_tokens=400)
    return root / "shards"


def test_batches_are_pure_in_seed_step_rank_and_split_the_global_batch(shards):
    s = ShardSet(shards, "train", 16, VOCAB)
    ids, labels = train_batch(s, 8, seed=3, step=5)
    again = train_batch(ShardSet(shards, "train", 16, VOCAB), 8, seed=3, step=5)
    assert torch.equal(ids, again[0]) and torch.equal(labels, again[1])
    assert ids.shape == labels.shape == (8, 16) and ids.dtype == torch.int64
    assert torch.equal(ids[:, 1:], labels[:, :-1])
    assert not torch.equal(ids, train_batch(s, 8, seed=3, step=6)[0])
    assert not torch.equal(ids, train_batch(s, 8, seed=4, step=5)[0])
    halves = [train_batch(s, 8, seed=3, step=5, rank=r, world_size=2) for r in range(2)]
    assert not torch.equal(halves[0][0], halves[1][0])
    assert torch.equal(torch.cat([h[0] for h in halves]), ids)
    assert torch.equal(torch.cat([h[1] for h in halves]), labels)
    # Every row is seq_len + 1 consecutive tokens of one shard.
    stream = [np.asarray(t, dtype=np.int64) for t in s.tokens]
    for row in torch.cat([ids, labels[:, -1:]], dim=1).numpy():
        assert any(any((t[i:i + 17] == row).all() for i in range(len(t) - 16)) for t in stream)


def test_run_batches_follow_the_config(shards):
    cfg = load_config("tiny", overrides=["task=fineweb", f"data.path={shards}", f"data.vocab_size={VOCAB}",
                                         "data.seq_len=16", "train.batch_size=4", "train.seed=7"])
    ids, labels = run_train_batch(cfg, 2, rank=1, world_size=2)
    expected = train_batch(ShardSet(shards, "train", 16, VOCAB), 4, 7, 2, rank=1, world_size=2)
    assert torch.equal(ids, expected[0]) and torch.equal(labels, expected[1])
    from falcon_lab.train.data import ShardValBatches

    val = list(ShardValBatches(load_config("tiny", overrides=[
        "task=fineweb", f"data.path={shards}", f"data.vocab_size={VOCAB}", "data.seq_len=16",
        "train.batch_size=4", "data.val_windows=10"])))
    assert [len(b[0]) for b in val] == [4, 4, 2] and torch.equal(val[0][0][1, 0], val[0][1][0, -1])
    with pytest.raises(ConfigError, match="needs data.path"):
        load_config("tiny", overrides=["task=fineweb"])
    assert load_config("fineweb-124m").train.batch_size == 480


def test_windows_and_token_checks(shards, tmp_path):
    s = ShardSet(shards, "val", 16, VOCAB)
    idx = val_windows(s, 100)
    assert list(idx) == list(range(0, 16 * len(idx), 16)) and len(idx) == (400 - 1) // 16
    with pytest.raises(ValueError, match="265-id tokenizer, more than the vocabulary of 100 ids"):
        ShardSet(shards, "train", 16, 100)
    # Without a manifest (shards made elsewhere) every token is checked.
    write_shard(tmp_path / "x_train_000001.bin", np.arange(30, dtype=np.uint16) * 5)
    with pytest.raises(ValueError, match="token 100 at position 20 is outside the vocabulary of 100"):
        ShardSet(tmp_path, "train", 16, 100)
    write_shard(tmp_path / "x_train_000001.bin", np.arange(10, dtype=np.uint16))
    with pytest.raises(ValueError, match="no window of 17 tokens"):
        ShardSet(tmp_path, "train", 16, VOCAB)
    with pytest.raises(ValueError, match="no val shards"):
        ShardSet(tmp_path, "val", 16, VOCAB)


def test_read_texts(tmp_path):
    good = tmp_path / "l.jsonl"
    good.write_text('{"text": "a b"}\n\n{"text": "c"}\n')
    assert read_texts(good) == ["a b", "c"]
    plain = tmp_path / "w.txt"
    plain.write_text(" = Title = \n\n line\n")
    assert read_texts(plain) == [" = Title = \n\n line\n"]
    (tmp_path / "bad.jsonl").write_text('{"txt": 1}\n')
    with pytest.raises(ValueError, match="line 1: needs a string field 'text'"):
        read_texts(tmp_path / "bad.jsonl")


def test_stream_nll_counts_every_token_once():
    torch.manual_seed(0)
    table = torch.randn(11, 11)
    model = lambda ids: table[ids]  # noqa: E731 -- a bigram model: logits depend on the current token only
    tokens = np.random.default_rng(0).integers(0, 11, size=40).astype(np.uint16)
    logp = torch.log_softmax(table, -1)
    by_hand = -sum(float(logp[tokens[i], tokens[i + 1]]) for i in range(39))
    for seq_len, batch in ((5, 2), (7, 3), (39, 1), (100, 4)):
        got = stream_nll(model, tokens, seq_len, batch_size=batch)
        assert got.tokens == 39 and got.nll_sum == pytest.approx(by_hand, rel=1e-6)


def test_the_val_shard_is_named_after_its_folder(tmp_path):
    from falcon_lab.cli.eval import val_name

    assert val_name(Path("data/fineweb-edu")) == "fineweb-edu-val"
    assert val_name(tmp_path / "debian-docs") == "debian-docs-val"
    assert val_name(tmp_path / "debian-docs" / ".") == "debian-docs-val"


def test_lab_train_fineweb_then_eval_ppl(shards, tmp_path):
    out = tmp_path / "run"
    code, text = invoke("train", "--task", "fineweb", "--preset", "tiny", "--max-steps", "3", "--out", str(out),
                        "--results", str(tmp_path), "--no-progress", "--set", f"data.path={shards}",
                        "--set", f"data.vocab_size={VOCAB}", "--set", "data.seq_len=16",
                        "--set", "train.batch_size=4")
    assert code == 0, text
    assert "finished (3 steps)" in text
    code, text = invoke("eval", "ppl", "--run", str(out), "--max-tokens", "16")
    assert code == 0, text
    # The val shard is named after its folder (data/debian-docs -> debian-docs-val), not after FineWeb-Edu.
    saved = json.loads((out / "perplexity.json").read_text())[f"{shards.name}-val"]
    assert saved["tokens"] == 16 and saved["step"] == 3 and math.isfinite(saved["ppl"])
    assert f"{shards.name}-val: ppl {saved['ppl']:.4f}" in text
    # One window by hand: the last checkpoint's model on the val shard's first 17 tokens.
    from falcon_lab.eval.run_weights import load_run_model

    model = load_run_model(out, "last").model
    window = torch.from_numpy(read_shard(next(shards.glob("*_val_*.bin")))[:17].astype(np.int64))
    with torch.no_grad():
        logp = torch.log_softmax(model(window[None, :-1]).double(), -1)[0]
    nll = -logp[torch.arange(16), window[1:]].mean().item()
    assert saved["ppl"] == pytest.approx(math.exp(nll), rel=1e-5)
    lambada = tmp_path / "lambada.jsonl"
    lambada.write_text("".join(json.dumps({"text": t}) + "\n" for t in documents(3, seed=5)))
    code, text = invoke("eval", "ppl", "--run", str(out), "--text", str(lambada), "--seq-len", "8")
    assert code == 0, text
    scored = json.loads((out / "perplexity.json").read_text())
    assert set(scored) == {f"{shards.name}-val", "lambada"} and math.isfinite(scored["lambada"]["ppl"])
    code, text = invoke("eval", "ppl", "--run", str(out), "--text", str(tmp_path / "missing.jsonl"))
    assert code == 2 and "does not exist" in text
