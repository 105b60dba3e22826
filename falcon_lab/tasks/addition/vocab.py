"""Character-level vocabulary of the addition task: special tokens, digits, '+' and '='."""

from __future__ import annotations

from collections.abc import Iterable

PAD = 0
BOS = 1
EOS = 2
DIGIT_0 = 3
PLUS = 13
EQUALS = 14
VOCAB_SIZE = 15

SPECIAL_IDS = frozenset({PAD, BOS, EOS})
TEXT_CHARS = "0123456789+="

_CHAR_TO_ID = {c: DIGIT_0 + i for i, c in enumerate("0123456789")} | {"+": PLUS, "=": EQUALS}
_ID_TO_CHAR = {i: c for c, i in _CHAR_TO_ID.items()}

# Fast path: ids fit in a byte, so a whole row encodes with one bytes.translate. chr(PAD), chr(BOS)
# and chr(EOS) stand for the special tokens and map to themselves.
_TABLE = bytes.maketrans(TEXT_CHARS.encode(), bytes(_CHAR_TO_ID[c] for c in TEXT_CHARS))
_REJECT = bytes(b for b in range(256) if chr(b) not in TEXT_CHARS and b not in SPECIAL_IDS)


def encode(text: str) -> list[int]:
    """Token ids of `text`, one per character; only digits, '+' and '=' are accepted."""
    try:
        return [_CHAR_TO_ID[c] for c in text]
    except KeyError as err:
        raise ValueError(
            f"encode: text {text!r} holds the character {err.args[0]!r}; "
            f"accepted characters are {TEXT_CHARS!r}"
        ) from None


def encode_bytes(text: str) -> bytes:
    """Fast twin of `encode`: the ids as bytes; chr(PAD), chr(BOS), chr(EOS) encode the specials."""
    raw = text.encode("utf-8")
    ids = raw.translate(_TABLE, _REJECT)
    if len(ids) != len(raw):
        bad = next(c for c in text if c not in TEXT_CHARS and ord(c) not in SPECIAL_IDS)
        raise ValueError(
            f"encode: text {text!r} holds the character {bad!r}; "
            f"accepted characters are {TEXT_CHARS!r}"
        )
    return ids


def decode(ids: Iterable[int]) -> str:
    """Text of `ids`: stops at the first EOS, skips PAD and BOS, rejects ids outside the vocabulary."""
    chars = []
    for i in ids:
        i = int(i)
        if i == EOS:
            break
        if i in SPECIAL_IDS:
            continue
        c = _ID_TO_CHAR.get(i)
        if c is None:
            raise ValueError(f"decode: id {i} is outside the vocabulary [0, {VOCAB_SIZE})")
        chars.append(c)
    return "".join(chars)
