"""The eigenvalue census of records/tasks/beta/study.py (the census of the parity-40 records):
its hooks wrap each mixer's rule with the rule's own signature, so a model still runs
with them in place and every write's eigenvalue along its key is collected."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from falcon_lab.mixers.model import LanguageModel, LMConfig

STUDY = Path(__file__).resolve().parents[1] / "records" / "tasks" / "beta" / "study.py"


def load_study():
    spec = importlib.util.spec_from_file_location("beta_study", STUDY)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("mixer, options, inner_product", [
    ("deltanet", {"beta_max": 2.0}, False),
    ("falcon-1", {"qk_norm": "l2", "gain": "ctx_beta", "beta_max": 2.0}, False),
    ("falcon-1a.3", {}, True),
])
def test_census_hooks_run_the_model_and_collect_every_write(mixer, options, inner_product):
    torch.manual_seed(0)
    model = LanguageModel(LMConfig(vocab_size=8, d_model=32, n_layers=2, n_heads=2, mixer=mixer,
                                   mixer_options=options))
    ids = torch.randint(0, 8, (3, 12))
    with torch.no_grad():
        before = model(ids)
    found = load_study().hook_census(model)
    with torch.no_grad():
        after = model(ids)
    assert torch.equal(before if isinstance(before, torch.Tensor) else before[0],
                       after if isinstance(after, torch.Tensor) else after[0])  # the hooks change nothing
    values = torch.cat(found)
    assert len(found) == 2 and values.numel() > 0  # one list entry a layer
    assert bool((values < 1).all())
    if inner_product:  # an inner-product rule's transition is its carry alone, in (0, 1]
        assert bool((values > 0).all())
