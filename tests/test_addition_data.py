"""Addition data layer: vocabulary, generator, seeds, jsonl files, batches and packing."""

import json
import random

import pytest
import torch

from falcon_lab.tasks.addition import jsonl as jsonl_mod
from falcon_lab.tasks.addition.batches import (
    IGNORE_INDEX,
    AdditionStream,
    make_batch,
    positions_needed,
    sample_tokens,
)
from falcon_lab.tasks.addition.generate import (
    SPLITS,
    derive_seed,
    generate_records,
    make_record,
    sample_record,
    validate_record,
)
from falcon_lab.tasks.addition.jsonl import read_jsonl, write_jsonl
from falcon_lab.tasks.addition.vocab import BOS, EOS, PAD, VOCAB_SIZE, decode, encode, encode_bytes

torch.set_num_threads(1)


def record_of_span(input_ids, span):
    # The prompt `a+b=` ends at span.start (the '=' position); rebuild the record from its operands.
    body = decode(input_ids[span.row, span.start - 2 * span.n - 1 : span.start].tolist())
    assert input_ids[span.row, span.start].item() == encode("=")[0]
    a, b = body.split("+")
    return make_record(int(a), int(b), span.n)


# --- vocabulary ---------------------------------------------------------------------------------

def test_vocab_ids_are_distinct_and_dense():
    ids = [PAD, BOS, EOS, *encode("0123456789+=")]
    assert sorted(ids) == list(range(VOCAB_SIZE))


def test_encode_decode_round_trip_and_specials():
    text = "0123+4567=09640"
    assert decode(encode(text)) == text
    assert decode([BOS, *encode("12"), PAD, *encode("3"), EOS, *encode("9")]) == "123"
    with pytest.raises(ValueError, match="'x'"):
        encode("12x")
    with pytest.raises(ValueError, match="outside the vocabulary"):
        decode([VOCAB_SIZE])


def test_encode_bytes_matches_encode():
    rng = random.Random(0)
    for _ in range(200):
        text = "".join(rng.choice("0123456789+=") for _ in range(rng.randint(0, 30)))
        assert list(encode_bytes(text)) == encode(text)
    assert list(encode_bytes(chr(BOS) + "1+2=" + chr(EOS))) == [BOS, *encode("1+2="), EOS]
    for bad in ("1a", "1\x03", "1é"):
        with pytest.raises(ValueError, match="accepted characters"):
            encode_bytes(bad)


# --- generator ----------------------------------------------------------------------------------

def test_worked_example():
    r = make_record(123, 4567, 4)
    assert r == {"prompt": "0123+4567=", "target": "09640", "n": 4, "a": "0123", "b": "4567"}


def test_carries():
    assert make_record(999, 1, 3)["target"] == "0001"  # 1000 reversed
    assert make_record(9, 9, 1)["target"] == "81"  # 18 reversed
    assert make_record(0, 0, 2)["target"] == "000"
    assert make_record(10**48 - 1, 10**48 - 1, 48)["target"] == str(2 * 10**48 - 2)[::-1]


@pytest.mark.parametrize("n", [1, 48, 64])
def test_widths_are_exact_and_sums_right(n):
    rng = random.Random(n)
    for _ in range(50):
        r = sample_record(rng, n)
        assert len(r["a"]) == len(r["b"]) == n and len(r["target"]) == n + 1
        assert r["prompt"] == f"{r['a']}+{r['b']}="
        assert int(r["target"][::-1]) == int(r["a"]) + int(r["b"])
        validate_record(r)


def test_wide_operands_use_the_full_range():
    # An int64-bound generator could not produce operands above 2**63.
    rng = random.Random(1)
    assert max(int(sample_record(rng, 48)["a"]) for _ in range(20)) > 2**63


def test_make_record_rejects_out_of_range():
    with pytest.raises(ValueError, match="10\\*\\*2"):
        make_record(100, 1, 2)
    with pytest.raises(ValueError, match="width n"):
        make_record(0, 0, 0)


def test_generation_is_deterministic_by_seed():
    a = list(generate_records("val", (1, 8), 20, seed=3))
    b = list(generate_records("val", (1, 8), 20, seed=3))
    c = list(generate_records("val", (1, 8), 20, seed=4))
    assert a == b and a != c
    assert [r["n"] for r in a] == [n for n in range(1, 9) for _ in range(20)]


def test_a_width_does_not_depend_on_the_range():
    wide = [r for r in generate_records("ood", (33, 48), 5, seed=0) if r["n"] == 40]
    assert wide == list(generate_records("ood", (40, 40), 5, seed=0))


def test_split_streams_are_distinct():
    seeds = {derive_seed(split, seed, "n", n) for split in SPLITS for seed in range(50) for n in (1, 5)}
    assert len(seeds) == len(SPLITS) * 50 * 2
    # Different splits at the same seed, and one split at neighbouring seeds, draw different samples.
    for seed in range(5):
        streams = [
            [r["prompt"] for r in generate_records(split, (12, 12), 50, seed)] for split in SPLITS
        ] + [[r["prompt"] for r in generate_records("val", (12, 12), 50, seed + 1)]]
        for i in range(len(streams)):
            for j in range(i + 1, len(streams)):
                assert not set(streams[i]) & set(streams[j])


def test_train_stream_differs_from_eval_files():
    train = set()
    for step in range(20):
        b = make_batch(seed=0, step=step, batch_size=16, digits=(10, 10))
        train |= {record_of_span(b.input_ids, s)["prompt"] for s in b.spans}
    val = {r["prompt"] for r in generate_records("val", (10, 10), 200, seed=0)}
    assert len(train) == 20 * 16 and not train & val


def test_bad_arguments_speak():
    with pytest.raises(ValueError, match="split 'test'"):
        list(generate_records("test"))
    with pytest.raises(ValueError, match="lo <= hi"):
        list(generate_records("val", (5, 3)))
    with pytest.raises(ValueError, match="n_per_length"):
        list(generate_records("val", (1, 2), 0))


# --- jsonl files --------------------------------------------------------------------------------

def test_write_then_read(tmp_path):
    path = tmp_path / "sub" / "ood.jsonl"
    count = write_jsonl(path, "ood", n_per_length=3, seed=7)
    assert count == 16 * 3
    records = read_jsonl(path)
    assert records == list(generate_records("ood", (33, 48), 3, seed=7))
    assert [p.name for p in path.parent.iterdir()] == ["ood.jsonl"]


def test_writer_leaves_no_partial_file(tmp_path, monkeypatch):
    path = tmp_path / "val.jsonl"
    write_jsonl(path, "val", (1, 2), 2, seed=0)
    before = path.read_bytes()
    calls = {"n": 0}
    real = jsonl_mod.json.dumps

    def failing_dumps(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] > 5:
            raise RuntimeError("interrupted")
        return real(*args, **kwargs)

    monkeypatch.setattr(jsonl_mod.json, "dumps", failing_dumps)
    with pytest.raises(RuntimeError, match="interrupted"):
        write_jsonl(path, "val", (1, 8), 10, seed=1)
    assert calls["n"] == 6  # lines were written before the failure
    assert path.read_bytes() == before  # the old file is untouched
    assert [p.name for p in tmp_path.iterdir()] == ["val.jsonl"]  # no temporary left behind

    fresh = tmp_path / "fresh.jsonl"
    calls["n"] = 0
    with pytest.raises(RuntimeError):
        write_jsonl(fresh, "val", (1, 8), 10, seed=1)
    assert not fresh.exists()


@pytest.mark.parametrize(
    "line, field",
    [
        ("{not json", "not valid JSON"),
        ("", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"prompt": "1+2=", "target": "30", "n": 1, "a": "1"}', "'b' is missing"),
        ('{"prompt": "1+2=", "target": "30", "n": "1", "a": "1", "b": "2"}', "'n'"),
        ('{"prompt": "1+2=", "target": "30", "n": 1, "a": "01", "b": "2"}', "'a'"),
        ('{"prompt": "1+2=", "target": "40", "n": 1, "a": "1", "b": "2"}', "'target'"),
        ('{"prompt": "1+3=", "target": "30", "n": 1, "a": "1", "b": "2"}', "'prompt'"),
    ],
)
def test_corrupt_line_names_line_and_field(tmp_path, line, field):
    path = tmp_path / "bad.jsonl"
    good = json.dumps(make_record(1, 2, 1))
    path.write_text(f"{good}\n{good}\n{line}\n{good}\n")
    with pytest.raises(ValueError, match="line 3") as err:
        read_jsonl(path)
    assert field in str(err.value) and "bad.jsonl" in str(err.value)


# --- batches ------------------------------------------------------------------------------------

@pytest.mark.parametrize("bos", [False, True])
def test_loss_mask_is_target_and_eos_only(bos):
    b = make_batch(seed=1, step=0, batch_size=8, digits=(1, 6), bos=bos)
    assert b.input_ids.dtype == b.labels.dtype == torch.int64
    assert b.input_ids.shape == b.labels.shape == (8, positions_needed(6, bos))
    for row, span in enumerate(b.spans):
        ids = b.input_ids[row].tolist()
        text = decode(ids)
        prompt, _ = text.split("=")
        a, bb = prompt.split("+")
        target = make_record(int(a), int(bb), span.n)["target"]
        expected = [IGNORE_INDEX] * b.labels.shape[1]
        expected[span.start : span.stop] = encode(target) + [EOS]
        assert b.labels[row].tolist() == expected
        # The first labelled position reads '='; labels are the next token of the input row.
        assert ids[span.start] == encode("=")[0]
        assert ids[span.start + 1 : span.stop] == encode(target)
        assert ids[0] == (BOS if bos else ids[0])


def test_pack_rows_matches_sample_tokens():
    b = make_batch(seed=2, step=3, batch_size=4, digits=(1, 9), seq_len=120, pack=True, bos=True)
    for r in range(4):
        ids = b.input_ids[r].tolist()
        pos = 0
        for s in [s for s in b.spans if s.row == r]:
            tokens, start = sample_tokens(record_of_span(b.input_ids, s), bos=True)
            assert ids[pos : pos + len(tokens) - 1] == tokens[:-1]
            assert (pos + start - 1, pos + len(tokens) - 1) == (s.start, s.stop)
            pos += len(tokens)
        assert pos > 0 and all(t == PAD for t in ids[pos:])


def test_packing_keeps_every_label():
    seq_len = 200
    b = make_batch(seed=0, step=5, batch_size=6, digits=(1, 12), seq_len=seq_len, pack=True)
    assert b.input_ids.shape == (6, seq_len)
    assert len(b.spans) > 6  # several samples per row
    covered = torch.zeros_like(b.labels, dtype=torch.bool)
    for s in b.spans:
        assert 0 <= s.start < s.stop <= seq_len and s.stop - s.start == s.n + 2
        assert not covered[s.row, s.start : s.stop].any()  # spans do not overlap
        covered[s.row, s.start : s.stop] = True
        got = b.labels[s.row, s.start : s.stop].tolist()
        assert got == encode(record_of_span(b.input_ids, s)["target"]) + [EOS]
    # Every labelled position belongs to a span, so no sample was cut.
    assert torch.equal(covered, b.labels != IGNORE_INDEX)


def test_batches_are_pure_functions_of_seed_step_rank():
    kw = dict(batch_size=5, digits=(3, 20), seq_len=300, pack=True)
    a = make_batch(seed=9, step=12, **kw)
    b = make_batch(seed=9, step=12, **kw)
    assert torch.equal(a.input_ids, b.input_ids) and torch.equal(a.labels, b.labels)
    assert a.spans == b.spans
    assert not torch.equal(a.input_ids, make_batch(seed=9, step=13, **kw).input_ids)
    assert not torch.equal(a.input_ids, make_batch(seed=10, step=12, **kw).input_ids)


def test_ranks_draw_different_rows_that_tile_the_global_batch():
    r0 = make_batch(seed=0, step=4, batch_size=8, digits=(5, 10), rank=0)
    r1 = make_batch(seed=0, step=4, batch_size=8, digits=(5, 10), rank=1)
    assert not set(map(tuple, r0.input_ids.tolist())) & set(map(tuple, r1.input_ids.tolist()))
    whole = make_batch(seed=0, step=4, batch_size=16, digits=(5, 10))
    assert torch.equal(torch.cat([r0.input_ids, r1.input_ids]), whole.input_ids)


def test_width_range_per_call():
    b = make_batch(seed=0, step=0, batch_size=64, digits=(3, 4))
    assert {s.n for s in b.spans} == {3, 4}
    b = make_batch(seed=0, step=0, batch_size=8, digits=(48, 48))
    assert {s.n for s in b.spans} == {48} and b.input_ids.shape[1] == positions_needed(48)


def widen(step):
    # A curriculum: the width range grows with the step (module level so workers can pickle it).
    return (1, 1 + step)


def test_stream_resumes_and_shards_workers():
    batches = list(AdditionStream(seed=3, batch_size=4, digits=widen, num_steps=6))
    assert len(batches) == 6
    assert max(s.n for s in batches[0].spans) == 1
    resumed = list(AdditionStream(seed=3, batch_size=4, digits=widen, start_step=4, num_steps=2))
    for x, y in zip(batches[4:], resumed):
        assert torch.equal(x.input_ids, y.input_ids) and x.spans == y.spans
    loader = torch.utils.data.DataLoader(
        AdditionStream(seed=3, batch_size=4, digits=widen, num_steps=6),
        batch_size=None,
        num_workers=2,
    )
    for x, y in zip(batches, loader):
        assert torch.equal(x.input_ids, y.input_ids) and torch.equal(x.labels, y.labels)


def test_batch_arguments_speak():
    with pytest.raises(ValueError, match="seq_len=10 is too short"):
        make_batch(0, 0, 2, (1, 5), seq_len=10)
    with pytest.raises(ValueError, match="needs seq_len"):
        make_batch(0, 0, 2, (1, 5), pack=True)
    with pytest.raises(ValueError, match="batch_size"):
        make_batch(0, 0, 0)
