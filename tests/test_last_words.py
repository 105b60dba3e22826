"""`lab data last-words`: LAMBADA-style passages from a val shard, read back by `lab eval lambada`'s split."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from falcon_lab.cli import app
from falcon_lab.eval.lambada import split_last_word
from falcon_lab.tasks.fineweb import encode_documents, load_tokenizer
from falcon_lab.tasks.fineweb.last_words import prose_passage, shard_passages, write_last_words
from falcon_lab.tasks.fineweb.shards import write_shard
from tests.fineweb_util import write_rank_file

PROSE = " ".join(f"word{i} is here" for i in range(15)) + " and the story ends with the lantern."
SHORT = "Too short to count as a passage."
MARKUP = "Use ``os.path`` and *emphasis* here " + " ".join(["plain"] * 40) + " so it ends."
NUMBER_LAST = " ".join(["plain"] * 45) + " version 3.11."


@pytest.fixture
def enc(tmp_path):
    return load_tokenizer(write_rank_file(tmp_path / "tiny.tiktoken"))


def test_a_passage_is_prose_ending_in_a_full_stop_after_a_word():
    passage = prose_passage("  " + PROSE.replace(" is ", "\n is "), min_words=40)
    assert passage == " ".join(PROSE.split())[:-1]
    assert split_last_word(passage) == (passage[: -len(" lantern")], " lantern")
    assert prose_passage(SHORT, min_words=4) is not None and prose_passage(SHORT, min_words=40) is None
    for rejected in (MARKUP, NUMBER_LAST, PROSE[:-1], PROSE + ".."):
        assert prose_passage(rejected, min_words=40) is None


def test_shard_passages_keep_order_drop_repeats_and_the_cut_last_paragraph(tmp_path, enc):
    first = PROSE.replace("lantern", "harbour")
    docs = [f"Title\n\n{first}\n\n{MARKUP}", f"{PROSE}\n\n{SHORT}\n\n{first}", f"{PROSE.replace('lantern', 'end')}"]
    tokens = encode_documents(enc, docs)
    assert shard_passages(tokens, enc, min_words=40) == [first[:-1], PROSE[:-1]]  # the last paragraph: dropped
    write_shard(tmp_path / "docs_val_000000.bin", tokens)
    info = write_last_words(tmp_path / "docs_val_000000.bin", enc, tmp_path / "lw.jsonl", n=1)
    assert info["passages"] == 1 and info["found"] == 2
    lines = (tmp_path / "lw.jsonl").read_text().splitlines()
    assert [json.loads(line)["text"] for line in lines] == [first[:-1]]
    with pytest.raises(ValueError, match="no paragraph"):
        write_last_words(tmp_path / "docs_val_000000.bin", enc, tmp_path / "none.jsonl", min_words=500)
    assert not (tmp_path / "none.jsonl").exists()


def test_cli_writes_the_file_and_names_a_missing_folder(tmp_path, enc):
    ranks = tmp_path / "tiny.tiktoken"
    data = tmp_path / "shards"
    data.mkdir()
    write_shard(data / "docs_val_000000.bin", encode_documents(enc, [f"{PROSE}\n\n{PROSE}x.\n\n{SHORT}"]))
    runner = CliRunner()
    result = runner.invoke(app, ["data", "last-words", "--data", str(data), "--tokenizer", str(ranks)])
    assert result.exit_code == 0, result.output
    assert json.loads((data / "last_words_val.jsonl").read_text())["text"] == PROSE[:-1]
    missing = runner.invoke(app, ["data", "last-words", "--data", str(tmp_path / "nowhere"), "--tokenizer",
                                  str(ranks)])
    assert missing.exit_code == 2 and "nowhere" in missing.output
