"""Composition of permutations of five elements (the S5 word problem; A5, its even half, as an option).

Each token is a group element g_t; the target at position t is the product so far, the permutation
obtained by applying g_1, then g_2, ..., then g_t: p_t(i) = g_t(p_{t-1}(i)). A permutation is written as
the tuple of its images (σ(0), ..., σ(4)); token ids are 1 + its index in the lexicographic list of S5
(the identity is 1), PAD is 0, and the labels use the same ids. S5 is not solvable: its word problem is
NC1-complete (Barrington, 1989), and Merrill et al. (2024) argue that transformers and diagonal state-space
models, being in TC0, cannot solve it at every length unless TC0 = NC1. A5, its even half, is the smallest
group that is not solvable.
"""

from __future__ import annotations

import itertools
import random
from typing import Any

from falcon_lab.tasks.synthetic.common import Sample

GROUPS = ("S5", "A5")
ELEMENTS: tuple[tuple[int, ...], ...] = tuple(itertools.permutations(range(5)))
INDEX = {p: i for i, p in enumerate(ELEMENTS)}
VOCAB_SIZE = 1 + len(ELEMENTS)


def compose(first: tuple[int, ...], then: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation `first`, then `then`: i -> then(first(i))."""
    return tuple(then[first[i]] for i in range(len(first)))


def is_even(p: tuple[int, ...]) -> bool:
    """Whether `p` is an even permutation (an even number of inversions)."""
    return sum(p[i] > p[j] for i in range(len(p)) for j in range(i + 1, len(p))) % 2 == 0


# TABLE[a][b]: the index of element a followed by element b.
TABLE = tuple(tuple(INDEX[compose(a, b)] for b in ELEMENTS) for a in ELEMENTS)


def token(p: tuple[int, ...]) -> int:
    """The token id of permutation `p`."""
    return 1 + INDEX[tuple(p)]


def element(token_id: int) -> tuple[int, ...]:
    """The permutation of token id `token_id` (1..120)."""
    if not 1 <= token_id < VOCAB_SIZE:
        raise ValueError(f"token id {token_id} is no group element; accepted: 1..{VOCAB_SIZE - 1}")
    return ELEMENTS[token_id - 1]


class Permutation:
    """The word problem of `group` (S5 or A5); any length >= 1."""

    name = "permutation"
    vocab_size = VOCAB_SIZE
    min_length = 1

    def __init__(self, group: str = "S5") -> None:
        if group not in GROUPS:
            raise ValueError(f"group={group!r} is not accepted; accepted: {', '.join(GROUPS)}")
        self.group = group
        self.choices = [i for i, p in enumerate(ELEMENTS) if group == "S5" or is_even(p)]

    def check_length(self, length: int) -> None:
        if length < 1:
            raise ValueError(f"permutation needs length >= 1, got {length}")

    def sample(self, rng: random.Random, length: int) -> Sample:
        self.check_length(length)
        drawn = [self.choices[rng.randrange(len(self.choices))] for _ in range(length)]
        labels, product = [], INDEX[tuple(range(5))]
        for g in drawn:
            product = TABLE[product][g]
            labels.append(1 + product)
        return Sample(tuple(1 + g for g in drawn), tuple(labels))

    def record(self, sample: Sample) -> dict[str, Any]:
        def word(ids: tuple[int, ...]) -> list[str]:
            return ["".join(map(str, element(i))) for i in ids]

        return {"length": len(sample), "group": self.group, "elements": word(sample.tokens),
                "products": word(sample.labels), "tokens": list(sample.tokens), "labels": list(sample.labels)}
