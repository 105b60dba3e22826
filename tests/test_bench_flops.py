"""falcon_lab.bench.flops: a training step's model FLOPs and the utilisation they give."""

from __future__ import annotations

import pytest
import torch

from falcon_lab.bench.flops import attended, peak_flops, step_flops
from falcon_lab.config import load_config
from falcon_lab.reproduce.names import train_preset
from falcon_lab.tasks.addition import EOS
from falcon_lab.train.data import train_batch
from falcon_lab.train.module import LabModule


def test_attended_counts_the_causal_prefix_of_the_row_or_of_the_sample() -> None:
    ids = torch.tensor([[5, 5, EOS, 5, EOS, 5]])
    assert attended(ids, EOS, apart=False) == pytest.approx(sum(range(1, 7)) / 6)
    # samples [5 5 EOS] [5 EOS] [5]: positions 1 2 3 | 1 2 | 1
    assert attended(ids, EOS, apart=True) == pytest.approx((1 + 2 + 3 + 1 + 2 + 1) / 6)


def test_peaks_by_device_name() -> None:
    assert peak_flops("NVIDIA H100 80GB HBM3") == 989e12 == peak_flops("NVIDIA H200")
    assert peak_flops("NVIDIA H100 PCIe") == 756e12
    assert peak_flops("cpu") is None and peak_flops(None) is None


@pytest.mark.parametrize("mixer", ["transformer", "falcon-1a.3", "falcon-1.3"])
def test_the_same_time_tables_step_is_about_4_2_tflop(mixer: str) -> None:
    """6 × 10.7M parameters × 65,536 tokens ≈ 4.2 TFLOP, the mixer's own work a few percent beside it."""
    preset, settings = train_preset("same-time", mixer)
    cfg = load_config(preset, None, list(settings), mixer=mixer)
    model = LabModule(cfg).model
    ids, _ = train_batch(cfg, 1000, 0, 1)
    flops = step_flops(model, cfg, ids)
    assert flops.tokens == 256 * 256
    assert 10.6e6 < flops.params < 10.8e6
    assert flops.dense == pytest.approx(6 * flops.params * flops.tokens)
    assert 4.1e12 < flops.dense < 4.3e12 and 0 < flops.mixer < 0.1 * flops.dense
    assert flops.mfu(flops.total / 989e12 / 0.35, "NVIDIA H100 80GB HBM3") == pytest.approx(0.35)
    assert flops.mfu(0.1, "cpu") is None
