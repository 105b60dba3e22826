"""The synthetic tasks (mqar, parity, permutation): samples right by direct computation, streams
deterministic by seed, batches a pure function of (seed, step, global row)."""

import random

import pytest
import torch

from falcon_lab.tasks.synthetic import (
    IGNORE_INDEX,
    MQAR,
    PAD,
    Parity,
    Permutation,
    eval_samples,
    make_batch,
    make_task,
    pad_batch,
    train_samples,
)
from falcon_lab.tasks.synthetic.permutation import ELEMENTS, element, is_even

TASKS = [Parity(), Permutation("S5"), Permutation("A5"), MQAR(vocab_size=64, tokens_per_pair=8)]
IDS = ["parity", "S5", "A5", "mqar"]


def test_parity_labels_are_the_xor_of_the_bits_so_far() -> None:
    task = Parity()
    rng = random.Random(3)
    for length in [1, 2, 7, 64, 200]:
        for _ in range(20):
            s = task.sample(rng, length)
            bits = [t - 1 for t in s.tokens]
            assert set(bits) <= {0, 1} and len(bits) == length
            assert [l - 1 for l in s.labels] == [sum(bits[: t + 1]) % 2 for t in range(length)]
    # both parities occur, so the check above could fail
    s = task.sample(random.Random(0), 200)
    assert {1, 2} <= set(s.labels)


def _matrix(p: tuple[int, ...]) -> torch.Tensor:
    """The permutation matrix of p: column i holds a 1 in row p(i)."""
    m = torch.zeros(5, 5, dtype=torch.int64)
    m[list(p), list(range(5))] = 1
    return m


@pytest.mark.parametrize("group", ["S5", "A5"])
def test_permutation_labels_are_the_product_so_far(group: str) -> None:
    task = Permutation(group)
    rng = random.Random(1)
    for length in [1, 3, 40]:
        for _ in range(10):
            s = task.sample(rng, length)
            product = torch.eye(5, dtype=torch.int64)
            state = list(range(5))
            for g_id, label in zip(s.tokens, s.labels):
                g = element(g_id)
                if group == "A5":
                    assert is_even(g)
                product = _matrix(g) @ product  # g after everything before it
                state = [g[i] for i in state]
                assert torch.equal(_matrix(element(label)), product)
                assert element(label) == tuple(state)


def test_groups_have_their_orders_and_draws_cover_them() -> None:
    assert len(ELEMENTS) == 120 == len(set(ELEMENTS))
    assert sum(map(is_even, ELEMENTS)) == 60
    assert element(1) == (0, 1, 2, 3, 4)  # the identity is token 1
    for group, order in (("S5", 120), ("A5", 60)):
        s = Permutation(group).sample(random.Random(0), 4000)
        assert len(set(s.tokens)) == order
    assert not is_even((1, 0, 2, 3, 4)) and is_even((1, 2, 0, 3, 4))


def test_mqar_answers_are_the_values_paired_with_the_queried_keys() -> None:
    task = MQAR(vocab_size=64, tokens_per_pair=8)
    rng = random.Random(2)
    for length in [8, 15, 16, 33, 64]:
        for _ in range(20):
            s = task.sample(rng, length)
            n = length // 8
            keys, values = s.tokens[0:2 * n:2], s.tokens[1:2 * n:2]
            assert len(set(keys)) == n and all(1 <= k < 32 for k in keys)
            assert len(set(values)) == n and all(32 <= v < 64 for v in values)
            pairs = dict(zip(keys, values))
            assert all(label == IGNORE_INDEX for label in s.labels[: 2 * n])
            queries = [(t, s.tokens[t], label) for t, label in enumerate(s.labels) if label != IGNORE_INDEX]
            assert sorted(q[1] for q in queries) == sorted(keys)  # every key asked once
            assert all(pairs[key] == value for _, key, value in queries)
            assert all((t - 2 * n) % 2 == 0 for t, _, _ in queries)
            assert all(1 <= t < 64 for t in s.tokens)


def test_mqar_queries_cluster_near_the_pairs_by_the_power_law() -> None:
    task, rng = MQAR(vocab_size=512, tokens_per_pair=16), random.Random(0)
    gaps = [(t - 2 * 8) // 2 for _ in range(300)
            for t, label in enumerate(task.sample(rng, 128).labels) if label != IGNORE_INDEX]
    slots = (128 - 16) // 2
    assert min(gaps) == 0 and max(gaps) < slots
    assert sum(g < slots // 4 for g in gaps) > 0.4 * len(gaps)  # uniform would give a quarter
    uniform = MQAR(vocab_size=512, tokens_per_pair=16, power_a=1.0)
    gaps = [(t - 16) // 2 for _ in range(300)
            for t, label in enumerate(uniform.sample(rng, 128).labels) if label != IGNORE_INDEX]
    assert abs(sum(g < slots // 4 for g in gaps) / len(gaps) - 0.25) < 0.05


@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_streams_are_deterministic_by_seed_and_differ_between_splits(task) -> None:
    lo = task.min_length
    a = eval_samples(task, "val", lo + 8, 5, seed=0)
    assert a == eval_samples(task, "val", lo + 8, 5, seed=0)
    assert a != eval_samples(task, "val", lo + 8, 5, seed=1)
    assert a != eval_samples(task, "test", lo + 8, 5, seed=0)
    assert all(len(s) == lo + 8 for s in a)
    ids, labels = make_batch(task, 0, 7, 6, (lo, lo + 8))
    again = make_batch(task, 0, 7, 6, (lo, lo + 8))
    assert torch.equal(ids, again[0]) and torch.equal(labels, again[1])
    assert not torch.equal(ids, make_batch(task, 0, 8, 6, (lo, lo + 8))[0])
    assert not torch.equal(ids, make_batch(task, 1, 7, 6, (lo, lo + 8))[0])


@pytest.mark.parametrize("task", TASKS, ids=IDS)
def test_ranks_slice_the_global_batch(task) -> None:
    lengths = (task.min_length, task.min_length + 10)
    whole_ids, whole_labels = make_batch(task, 3, 5, 8, lengths)
    for world in (2, 4):
        parts = [make_batch(task, 3, 5, 8 // world, lengths, rank=r) for r in range(world)]
        assert torch.equal(torch.cat([p[0] for p in parts]), whole_ids)
        assert torch.equal(torch.cat([p[1] for p in parts]), whole_labels)


def test_batches_pad_after_each_sample_and_draw_every_length() -> None:
    task = Parity()
    samples = train_samples(task, 0, 2, range(64), (1, 4))
    assert {len(s) for s in samples} == {1, 2, 3, 4}
    ids, labels = make_batch(task, 0, 2, 64, (1, 4), seq_len=6)
    assert ids.shape == labels.shape == (64, 6)
    for row, s in enumerate(samples):
        assert ids[row, : len(s)].tolist() == list(s.tokens) and labels[row, : len(s)].tolist() == list(s.labels)
        assert (ids[row, len(s):] == PAD).all() and (labels[row, len(s):] == IGNORE_INDEX).all()
    with pytest.raises(ValueError, match="seq_len=3 is shorter than the longest sample"):
        pad_batch(samples, 3)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: make_task("chess"), "unknown task 'chess'; accepted: mqar, parity, permutation"),
    (lambda: make_task("permutation", group="S6"), "group='S6' is not accepted; accepted: S5, A5"),
    (lambda: make_task("mqar", tokens_per_pair=3), "tokens_per_pair=3 leaves no query slot"),
    (lambda: make_task("mqar", vocab_size=3), "vocab_size=3 is too small"),
    (lambda: MQAR(16, 4).check_length(40), "needs 10 distinct keys but vocab_size 16 has 7"),
    (lambda: MQAR(16, 4).check_length(3), "holds no pair"),
    (lambda: make_batch(Parity(), 0, 0, 4, (0, 3)), "lengths must satisfy 1 <= lo <= hi"),
    (lambda: eval_samples(Parity(), "ood", 3, 2), "split 'ood' is not one of train, val, test"),
])
def test_mistakes_name_the_option(make, message: str) -> None:
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        make()


def test_mqar_longest_length_fits_the_vocabulary() -> None:
    task = MQAR(vocab_size=16, tokens_per_pair=4)
    task.check_length(task.max_length())
    with pytest.raises(ValueError):
        task.check_length(task.max_length() + 1)
    s = task.sample(random.Random(0), task.max_length())
    assert sorted(s.tokens[0:2 * task.max_pairs:2]) == list(range(1, 8))  # every key of the vocabulary
