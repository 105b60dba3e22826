"""A row of a paper's table that a campaign trains, whichever table it is."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Generic, TypeVar

P = TypeVar("P")


@dataclass(frozen=True)
class Row(Generic[P]):
    """A table row: the registry mixer it trains, its label, and the paper's numbers when it has them."""

    name: str
    label: str
    paper: P | None = None
