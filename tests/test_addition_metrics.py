"""Addition evaluation helpers and random token batches: tensors in, numbers out."""

import pytest
import torch

from falcon_lab.tasks.addition.batches import IGNORE_INDEX, make_batch
from falcon_lab.tasks.addition.generate import generate_records, make_record
from falcon_lab.tasks.addition.metrics import (
    free_running_check,
    per_width_accuracy,
    prompt_ids,
    span_correct,
    suffix_accuracy,
    summarise,
    teacher_forced_batch,
)
from falcon_lab.tasks.addition.vocab import BOS, EOS, PAD, VOCAB_SIZE, decode, encode
from falcon_lab.tasks.random_tokens import random_token_batch

torch.set_num_threads(1)

X = IGNORE_INDEX


def test_teacher_forced_batch_layout():
    records = [make_record(123, 4567, 4), make_record(9, 9, 1)]
    input_ids, labels = teacher_forced_batch(records)
    assert input_ids.shape == labels.shape == (2, 15) and input_ids.dtype == torch.int64
    assert input_ids[0].tolist() == encode("0123+4567=09640")
    assert labels[0].tolist() == [X] * 9 + encode("09640") + [EOS]
    assert input_ids[1].tolist() == encode("9+9=81") + [EOS] + [PAD] * 8
    assert labels[1].tolist() == [X] * 3 + encode("81") + [EOS] + [X] * 9
    with_bos, bos_labels = teacher_forced_batch(records, bos=True)
    assert with_bos[0].tolist() == [BOS] + input_ids[0].tolist()
    assert bos_labels[0, 1:].tolist() == labels[0].tolist()
    with pytest.raises(ValueError, match="empty"):
        teacher_forced_batch([])


def test_suffix_accuracy_hand_made():
    labels = torch.tensor([
        [X, X, 5, 6, EOS, X],
        [X, X, 5, 6, EOS, X],
        [X, 7, 8, EOS, X, X],
        [X, X, X, X, X, X],
    ])
    preds = torch.tensor([
        [9, 9, 5, 6, EOS, 9],  # right everywhere it is scored; unscored positions do not count
        [X, X, 6, 6, EOS, X],  # one wrong digit
        [X, X, 7, 8, EOS, X],  # the whole suffix one position late: off by one
        [X, X, X, X, X, X],  # nothing to score
    ]).clamp(min=0)
    got = suffix_accuracy(preds, labels)
    assert got.whole_correct.tolist() == [True, False, False, False]
    assert got.whole_correct.dtype == torch.bool
    assert got.per_token_correct.tolist() == [3, 2, 0, 0]
    assert got.n_tokens.tolist() == [3, 3, 3, 0]


def test_suffix_accuracy_from_logits_matches_preds():
    torch.manual_seed(0)
    records = list(generate_records("val", (1, 5), 4, seed=0))
    _, labels = teacher_forced_batch(records)
    logits = torch.randn(*labels.shape, VOCAB_SIZE)
    # Make half the rows predict their labels exactly.
    for row in range(0, len(records), 2):
        for pos in (labels[row] != X).nonzero().flatten():
            logits[row, pos, labels[row, pos]] = 100.0
    got = suffix_accuracy(logits, labels)
    ref = suffix_accuracy(logits.argmax(-1), labels)
    assert all(torch.equal(a, b) for a, b in zip(got, ref))
    assert got.whole_correct[::2].all()
    with pytest.raises(ValueError, match="logits_or_preds"):
        suffix_accuracy(logits.argmax(-1).float(), labels)
    with pytest.raises(ValueError, match="do not match"):
        suffix_accuracy(logits[:, :-1], labels)


def test_span_correct_on_packed_batch():
    b = make_batch(seed=0, step=0, batch_size=3, digits=(1, 6), seq_len=80, pack=True)
    preds = torch.where(b.labels == X, PAD, b.labels)
    assert span_correct(preds, b.labels, b.spans).all()
    wrong = b.spans[1]
    preds[wrong.row, wrong.stop - 1] = encode("7")[0]  # EOS replaced by a digit
    flags = span_correct(preds, b.labels, b.spans)
    assert flags.tolist() == [i != 1 for i in range(len(b.spans))]


def test_free_running_check():
    r = make_record(999, 1, 3)  # target "0001"
    assert free_running_check(encode("0001") + [EOS, 5, 5], r)
    assert not free_running_check(encode("0001") + [5], r)  # no EOS
    assert not free_running_check(encode("0001"), r)  # stopped before EOS
    assert not free_running_check(encode("1000") + [EOS], r)
    assert free_running_check(decode(encode("0001") + [EOS, 7]), r)
    assert not free_running_check("001", r)
    assert prompt_ids(r) == encode("999+001=")
    assert prompt_ids(r, bos=True) == [BOS] + encode("999+001=")


def test_per_width_accuracy_and_summarise():
    per_n = per_width_accuracy([True, False, True, True, False], [33, 33, 48, 48, 48])
    assert per_n == {33: 50.0, 48: pytest.approx(200 / 3)}
    with pytest.raises(ValueError, match="widths"):
        per_width_accuracy([True], [1, 2])

    table = {n: 100.0 for n in range(1, 33)} | {n: float(100 - 2 * (n - 33)) for n in range(33, 49)}
    table[7] = 96.0
    s = summarise(table)
    assert s["val_acc"] == pytest.approx((31 * 100 + 96) / 32)
    assert s["ood_mean"] == pytest.approx(sum(100 - 2 * i for i in range(16)) / 16)
    assert s["acc@33"] == 100.0 and s["acc@48"] == 70.0
    partial = summarise({n: 90.0 for n in range(33, 40)})
    assert partial == {"val_acc": None, "ood_mean": None, "acc@33": 90.0, "acc@48": None}


def test_random_token_batch():
    x, y = random_token_batch(vocab_size=50, seq_len=64, batch_size=4, seed=1, step=2)
    assert x.shape == y.shape == (4, 64) and x.dtype == y.dtype == torch.int64
    assert torch.equal(x[:, 1:], y[:, :-1])
    assert 0 <= x.min() and x.max() < 50
    x2, y2 = random_token_batch(50, 64, 4, seed=1, step=2)
    assert torch.equal(x, x2) and torch.equal(y, y2)
    assert not torch.equal(x, random_token_batch(50, 64, 4, seed=1, step=3)[0])
    assert not torch.equal(x, random_token_batch(50, 64, 4, seed=1, step=2, rank=1)[0])
    with pytest.raises(ValueError, match="vocab_size"):
        random_token_batch(0, 64, 4)
