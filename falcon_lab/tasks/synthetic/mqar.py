"""Multi-query associative recall (MQAR) as zoology (Arora et al., 2023) defines it.

A sample of T tokens holds N = T // tokens_per_pair key-value pairs. Keys are drawn without replacement
from the lower half of the vocabulary (ids 1 .. V/2 − 1), values without replacement from the upper half
(V/2 .. V − 1). The first 2N tokens lay the pairs out, k_1 v_1 k_2 v_2 ... k_N v_N; then each key is asked
once, in random order, at even offsets 2·g of the rest of the sequence, the gaps g drawn without
replacement with zoology's power law (weight of gap g ∝ g^(a − 1) for g = 1, 2, ...; a = 0.01 puts most
queries near the pairs). At a query's position the label is the key's value; every other position is
unscored (loss and accuracy on the query answers only), and its input is a filler token drawn uniformly
from ids 1 .. V − 1 (zoology's random non-queries).

Longer sequences hold more pairs, so held-out lengths test both recall at a distance and a larger
memory. T >= 4N (tokens_per_pair >= 4) leaves a query slot for every key.
"""

from __future__ import annotations

import random
from typing import Any

from falcon_lab.tasks.synthetic.common import IGNORE_INDEX, Sample

POWER_A = 0.01


class MQAR:
    """MQAR over a vocabulary of `vocab_size` ids (0 is PAD), N = T // `tokens_per_pair` pairs per sample."""

    name = "mqar"

    def __init__(self, vocab_size: int = 256, tokens_per_pair: int = 8, power_a: float = POWER_A) -> None:
        if vocab_size < 4:
            raise ValueError(f"vocab_size={vocab_size} is too small for MQAR; accepted: >= 4 (keys in the lower "
                             f"half, values in the upper)")
        if tokens_per_pair < 4:
            raise ValueError(f"tokens_per_pair={tokens_per_pair} leaves no query slot for every key; "
                             f"accepted: >= 4 (2 tokens per pair, 2 per query)")
        if not 0 < power_a <= 1:
            raise ValueError(f"power_a={power_a} must lie in (0, 1] (1: gaps uniform)")
        self.vocab_size, self.tokens_per_pair, self.power_a = vocab_size, tokens_per_pair, power_a
        self.keys = range(1, vocab_size // 2)
        self.values = range(vocab_size // 2, vocab_size)
        self.min_length = tokens_per_pair
        # The most pairs a sample can hold: every key (and value) at most once.
        self.max_pairs = min(len(self.keys), len(self.values))

    def pairs(self, length: int) -> int:
        """N, the number of key-value pairs (and queries) in a sample of `length` tokens."""
        return length // self.tokens_per_pair

    def max_length(self) -> int:
        """The longest length whose pairs all fit the vocabulary's keys and values."""
        return (self.max_pairs + 1) * self.tokens_per_pair - 1

    def check_length(self, length: int) -> None:
        if length < self.tokens_per_pair:
            raise ValueError(f"MQAR length {length} holds no pair; accepted: >= tokens_per_pair "
                             f"({self.tokens_per_pair})")
        if self.pairs(length) > self.max_pairs:
            raise ValueError(f"MQAR length {length} needs {self.pairs(length)} distinct keys but vocab_size "
                             f"{self.vocab_size} has {self.max_pairs}; accepted: lengths <= {self.max_length()} "
                             f"or a larger vocab_size")

    def sample(self, rng: random.Random, length: int) -> Sample:
        self.check_length(length)
        n = self.pairs(length)
        keys = rng.sample(self.keys, n)
        values = rng.sample(self.values, n)
        context = [t for pair in zip(keys, values) for t in pair]
        slots = (length - 2 * n) // 2
        gaps = _power_law_sample(rng, slots, n, self.power_a)
        tokens = context + [rng.randrange(1, self.vocab_size) for _ in range(length - 2 * n)]
        labels = [IGNORE_INDEX] * length
        for key, value, gap in zip(keys, values, gaps):
            tokens[2 * n + 2 * gap] = key
            labels[2 * n + 2 * gap] = value
        return Sample(tuple(tokens), tuple(labels))

    def record(self, sample: Sample) -> dict[str, Any]:
        n = self.pairs(len(sample))
        pairs = [[sample.tokens[2 * i], sample.tokens[2 * i + 1]] for i in range(n)]
        queries = [{"position": t, "key": sample.tokens[t], "value": v}
                   for t, v in enumerate(sample.labels) if v != IGNORE_INDEX]
        return {"length": len(sample), "pairs": pairs, "queries": queries, "tokens": list(sample.tokens),
                "labels": list(sample.labels)}


def _power_law_sample(rng: random.Random, slots: int, k: int, a: float) -> list[int]:
    """`k` distinct slots of 0 .. slots − 1, in draw order, slot s weighted (s + 1)^(a − 1)."""
    if k > slots:
        raise ValueError(f"cannot place {k} queries in {slots} slots")
    left = list(range(slots))
    weights = [(s + 1) ** (a - 1) for s in left]
    out = []
    for _ in range(k):
        (j,) = rng.choices(range(len(left)), weights=weights)
        out.append(left.pop(j))
        weights.pop(j)
    return out
