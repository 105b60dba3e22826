"""Addition samples (paper §5.2): prompt `digits_n(a)+digits_n(b)=`, target `rev(digits_{n+1}(a+b))`.

Operands are Python ints, so any width works (no int64 overflow). Every random stream is seeded
through `derive_seed`, a sha256 of the split name, the user's seed and the stream's coordinates, so
the train, val and ood streams differ for every pair of seeds.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Iterator
from typing import Any

SPLITS = ("train", "val", "ood")
DEFAULT_DIGITS: dict[str, tuple[int, int]] = {"train": (1, 32), "val": (1, 32), "ood": (33, 48)}
DEFAULT_N_PER_LENGTH = 100
RECORD_FIELDS = ("prompt", "target", "n", "a", "b")


def derive_seed(split: str, seed: int, *coords: int | str) -> int:
    """A 64-bit seed for the stream named by (split, seed, *coords); distinct names give distinct seeds."""
    check_split(split)
    name = "|".join(["addition", split, str(int(seed)), *map(str, coords)])
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "little")


def check_split(split: str) -> None:
    """Raise ValueError unless `split` is one of SPLITS."""
    if split not in SPLITS:
        raise ValueError(f"split {split!r} is not one of {SPLITS}")


def check_digits(digits: tuple[int, int], name: str = "digits") -> tuple[int, int]:
    """Validate an inclusive width range (lo, hi) with 1 <= lo <= hi; return it as ints."""
    try:
        lo, hi = (int(d) for d in digits)
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (lo, hi) of widths, got {digits!r}") from None
    if not 1 <= lo <= hi:
        raise ValueError(f"{name} must satisfy 1 <= lo <= hi, got ({lo}, {hi})")
    return lo, hi


def make_record(a: int, b: int, n: int) -> dict[str, Any]:
    """The width-n sample of a + b: {"prompt", "target", "n", "a", "b"}, a and b as n-digit strings."""
    if n < 1:
        raise ValueError(f"width n must be >= 1, got {n}")
    bound = 10**n
    if not (0 <= a < bound and 0 <= b < bound):
        raise ValueError(f"operands must lie in [0, 10**{n}), got a={a}, b={b}")
    a_text, b_text = str(a).zfill(n), str(b).zfill(n)
    target = str(a + b).zfill(n + 1)[::-1]
    return {"prompt": f"{a_text}+{b_text}=", "target": target, "n": n, "a": a_text, "b": b_text}


def sample_record(rng: random.Random, n: int) -> dict[str, Any]:
    """One sample of width n with a, b drawn uniformly from [0, 10**n) by `rng`."""
    bound = 10**n
    return make_record(rng.randrange(bound), rng.randrange(bound), n)


def generate_records(
    split: str,
    digits: tuple[int, int] | None = None,
    n_per_length: int = DEFAULT_N_PER_LENGTH,
    seed: int = 0,
) -> Iterator[dict[str, Any]]:
    """`n_per_length` samples for each width in `digits` (default: the split's range), in width order.

    Width n draws from its own stream (split, seed, "n", n), so a width's samples do not depend on
    the range they were generated with.
    """
    check_split(split)
    lo, hi = check_digits(DEFAULT_DIGITS[split] if digits is None else digits)
    if n_per_length < 1:
        raise ValueError(f"n_per_length must be >= 1, got {n_per_length}")
    for n in range(lo, hi + 1):
        rng = random.Random(derive_seed(split, seed, "n", n))
        for _ in range(n_per_length):
            yield sample_record(rng, n)


def validate_record(record: Any) -> dict[str, Any]:
    """Check a record's fields and arithmetic; raise ValueError naming the first bad field."""
    if not isinstance(record, dict):
        raise ValueError(f"record must be a JSON object, got {type(record).__name__}")
    for field in RECORD_FIELDS:
        if field not in record:
            raise ValueError(f"field {field!r} is missing")
    n = record["n"]
    if not isinstance(n, int) or isinstance(n, bool) or n < 1:
        raise ValueError(f"field 'n' must be an integer >= 1, got {n!r}")
    for field in ("a", "b"):
        v = record[field]
        if not (isinstance(v, str) and len(v) == n and v.isascii() and v.isdigit()):
            raise ValueError(f"field {field!r} must be a string of exactly {n} digits, got {v!r}")
    expected = make_record(int(record["a"]), int(record["b"]), n)
    for field in ("prompt", "target"):
        if record[field] != expected[field]:
            raise ValueError(f"field {field!r} is {record[field]!r}, expected {expected[field]!r}")
    return record
