"""Runs trained one after another in one process (a campaign's single slot, a sweep's trials) share torch.compile's
compiled code: a model configured as an earlier run's reuses its graphs (its weights are the graphs' inputs), and each
other configuration adds an entry to the same functions' caches, past Dynamo's default of 8 of which the later runs
would train eagerly without a word. With the room every compiled run makes
(``falcon_lab.train.run.room_for_compiled_runs``) every configuration of a campaign compiles."""

from __future__ import annotations

import pytest
import torch
import torch._dynamo
from torch import nn

from falcon_lab.config import load_config
from falcon_lab.train import run
from falcon_lab.train.module import LanguageModel, lm_config


class Scaled(nn.Module):
    """A model whose configuration (``factor``, a constant of its forward) Dynamo guards on, as it does the mixers'."""

    def __init__(self, factor: int) -> None:
        super().__init__()
        self.factor = factor
        self.linear = nn.Linear(4, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x) * self.factor


@pytest.fixture
def compiles():
    """A list the compiler backend appends to at each compilation; Dynamo's limits set back after the test (by hand:
    pytest's monkeypatch would delete a config module's entry on undo) and its caches emptied before and after."""
    config = torch._dynamo.config
    names = ([n for n in ("recompile_limit", "accumulated_recompile_limit") if hasattr(config, n)]
             or ["cache_size_limit"])
    kept = {n: getattr(config, n) for n in names}
    torch._dynamo.reset()
    made: list[int] = []
    try:
        yield made
    finally:
        for name, value in kept.items():
            setattr(config, name, value)
        torch._dynamo.reset()


MADE: list[str] = []  # what the backend compiled: one backend for every call, as "inductor" is one (Dynamo's cache
# entries are the backend's own)


def _backend(gm: torch.fx.GraphModule, inputs: list) -> object:
    MADE.append(gm.__class__.__name__)
    return gm.forward


def _train_step(model: nn.Module, made: list[int]) -> None:
    before = len(MADE)
    torch.compile(model, backend=_backend)(torch.ones(2, 4)).sum().backward()
    made.extend(range(len(MADE) - before))


def test_without_room_the_ninth_configuration_of_a_process_runs_eagerly(compiles: list[int]) -> None:
    """The failure the room prevents, as Dynamo has it (so the test below notices if Dynamo's default changes)."""
    for factor in range(12):
        _train_step(Scaled(factor), compiles)
    assert len(compiles) == 8


def test_a_campaign_process_compiles_every_configuration_and_reuses_a_repeated_one(compiles: list[int]) -> None:
    run.room_for_compiled_runs()
    for factor in range(12):
        _train_step(Scaled(factor), compiles)
    assert len(compiles) == 12
    _train_step(Scaled(3), compiles)  # a new model of a configuration seen before: its graphs, no compilation
    _train_step(Scaled(11), compiles)
    assert len(compiles) == 12


def test_a_second_run_of_a_mixers_configuration_compiles_nothing(compiles: list[int]) -> None:
    """The lab's own model: a new instance of a configuration already compiled in the process reuses its graphs."""
    run.room_for_compiled_runs()
    made = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        model = LanguageModel(lm_config(load_config(preset="addition-tiny", mixer="transformer")))
        before = len(MADE)
        torch.compile(model, backend=_backend)(torch.randint(0, 10, (2, 12))).sum().backward()
        made.append(len(MADE) - before)
    assert made[0] > 0 and made[1] == 0
