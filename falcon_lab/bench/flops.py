"""Model FLOPs of a training step and the GPU's bf16 peak: model FLOP utilisation (MFU).

A step's FLOPs are counted as the field counts them (PaLM's appendix B; nanoGPT's `estimate_mfu`):
6·N per token for the forward and backward through the N parameters that multiply (every parameter but the
input embedding, whose lookup is no product; a tied output head multiplies and counts), plus the mixer's own
work that no parameter counts, forward and backward (three times the forward):

- attention: 4·d·c per token and layer forward (scores and values over the c positions it attends, d the
  width of the heads together), c from the step's own batch: the causal prefix of its row, or of its sample
  when samples are kept apart;
- a fast-weight or linear-recurrent mixer: the state's read and write per token and head, 2·d_k·d_v each (a
  regression rule's write reads the state too: 3 products, an inner-product rule's 2), plus the chunk's
  intra-chunk products, 2·C·(d_k + d_v) per token and head for chunks of C tokens (64).

The mixers' own terms are a few percent of 6·N at the table's size; they are estimates of the work the ops
must do, not of what a given kernel does. Peaks are the dense bf16 tensor-core figures of the data sheets.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

# dense bf16 tensor-core TFLOP/s by the device name's model (data sheets: SXM parts; the PCIe H100 is lower)
PEAK_BF16_TFLOPS = (("H200", 989.0), ("H100 PCIe", 756.0), ("H100", 989.0), ("A100", 312.0), ("L40S", 362.0),
                    ("A10G", 70.0))
CHUNK = 64


def peak_flops(device: str | None) -> float | None:
    """The device's dense bf16 peak in FLOP/s, or None for a device not in the table (a CPU)."""
    for model, tflops in PEAK_BF16_TFLOPS:
        if device and model in device:
            return tflops * 1e12
    return None


@dataclass(frozen=True)
class StepFlops:
    """FLOPs of one training step: 6·N·tokens (`dense`) and the mixer's own (`mixer`)."""

    tokens: int
    params: int
    dense: float
    mixer: float

    @property
    def total(self) -> float:
        return self.dense + self.mixer

    def mfu(self, step_s: float, device: str | None) -> float | None:
        """The fraction of the device's bf16 peak a step of `step_s` seconds reaches; None off the table."""
        peak = peak_flops(device)
        return None if peak is None or step_s <= 0 else self.total / step_s / peak


def attended(ids: Any, eos: int | None, apart: bool) -> float:
    """Mean number of positions a token attends to causally in the batch `ids` (rows × length): its position
    in its row plus one, or in its sample (ended by `eos`) when samples are kept apart."""
    import torch

    rows, length = ids.shape
    pos = torch.arange(1, length + 1, dtype=torch.float64).expand(rows, length)
    if not apart or eos is None:
        return float(pos.mean())
    after_end = torch.nn.functional.pad((ids[:, :-1] == eos), (1, 0), value=True)  # a sample starts here
    first = torch.cummax(torch.where(after_end, pos, torch.zeros_like(pos)), dim=1).values
    return float((pos - first + 1).mean())


def step_flops(model: Any, cfg: Any, ids: Any) -> StepFlops:
    """FLOPs of a training step of `model` (a LanguageModel) built from the run config `cfg` on the batch `ids`."""
    tokens = int(ids.numel())
    params = model.num_parameters(exclude_embeddings=True)
    if model.lm_head is None:  # the tied head multiplies by the embedding: it counts once
        params += model.embed.weight.numel()
    m = cfg.model
    d, layers, heads = m.d_model, m.n_layers, m.n_heads
    mixer = cfg.mixer
    if mixer == "transformer":
        apart = bool(getattr(m, "isolate_samples", False))
        inputs = model.positions.cfg if getattr(model, "positions", None) is not None else None
        per_token = 4 * d * attended(ids, getattr(inputs, "sample_end", None), apart)
    else:
        dk = dv = d // heads
        # a regression rule (and DeltaNet, on falcon-1's op) reads the state before its write as well
        spec = model.blocks[0].mixer.spec
        reads = 3 if spec is not None and spec.regression else 2
        per_token = heads * (reads * 2 * dk * dv + 2 * CHUNK * (dk + dv))
    return StepFlops(tokens, params, 6.0 * params * tokens, 3.0 * per_token * layers * tokens)
