"""Running parity: the input is a bit string, the target at every position the XOR of the bits so far.

Tokens: PAD 0, bit 0 as 1, bit 1 as 2; labels use the same ids for the parity bit. Trained on short
strings and tested on strings several times longer, it asks whether a mixer keeps one bit of state
exactly over any length (see the package docstring on eigenvalues).
"""

from __future__ import annotations

import random
from typing import Any

from falcon_lab.tasks.synthetic.common import Sample

ZERO, ONE = 1, 2
VOCAB_SIZE = 3


class Parity:
    """The running-parity task; any length >= 1."""

    name = "parity"
    vocab_size = VOCAB_SIZE
    min_length = 1

    def check_length(self, length: int) -> None:
        if length < 1:
            raise ValueError(f"parity needs length >= 1, got {length}")

    def sample(self, rng: random.Random, length: int) -> Sample:
        self.check_length(length)
        word = rng.getrandbits(length)
        bits = [(word >> i) & 1 for i in range(length)]
        labels, acc = [], 0
        for b in bits:
            acc ^= b
            labels.append(ZERO + acc)
        return Sample(tuple(ZERO + b for b in bits), tuple(labels))

    def record(self, sample: Sample) -> dict[str, Any]:
        return {"length": len(sample), "bits": "".join(str(t - ZERO) for t in sample.tokens),
                "parity": "".join(str(t - ZERO) for t in sample.labels),
                "tokens": list(sample.tokens), "labels": list(sample.labels)}
