"""`train.cuda_graphs`: the training forward and backward replayed from CUDA graphs.

A 10M-parameter model launches 1,100-3,100 kernels per step, and on an H200 most of a step is the host
issuing them (`records/bench/step/step.md`: 47-85 ms of loop against 21-51 ms of kernels for the
recurrent mixers). A CUDA graph issues a whole captured forward or backward at once. Addition batches
have one shape for a whole run (rows of the widest width, curriculum or not), so the model's forward and
backward are captured once, at the start of training, with `torch.cuda.make_graphed_callables`; the loss,
the clipping and the fused optimiser step stay eager (a few dozen kernels). With `train.compile` the
compiled model is captured: the warm-up passes before capture compile it, and the graph holds the fused
kernels torch.compile made and the mixers' Triton kernels between them, with none of the host work of the
compiled code's graph breaks.

What capture needs from the model: no host synchronisation and no host tensors inside the step, which
holds for the kernels' training paths (`validate=False`). A model that cannot be captured (an op that
synchronises, such as an eigenvalue solver's error check) fails at capture with the cause named, and the
run falls back to eager steps.
"""

from __future__ import annotations

from contextlib import nullcontext
from typing import Any

import torch
from torch import nn

# fp16 loss scaling (16-mixed) is not set up: lab train refuses it with cuda graphs
AUTOCAST = {"bf16-mixed": torch.bfloat16, "bf16-true": None, "32-true": None}


class _Forward(nn.Module):
    """The model's forward under the run's autocast, with autocast's cache off (capture needs that)."""

    def __init__(self, model: nn.Module, dtype: torch.dtype | None) -> None:
        super().__init__()
        self.model, self.dtype = model, dtype

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        context = (torch.autocast("cuda", dtype=self.dtype, cache_enabled=False) if self.dtype is not None
                   else nullcontext())
        with context:
            return self.model(input_ids)


def capture(model: nn.Module, shape: tuple[int, int], precision: str, device: torch.device) -> Any:
    """The model's training forward as a graphed callable for int64 inputs of `shape` (its backward is
    graphed too). Raises RuntimeError naming the cause when the model cannot be captured."""
    if device.type != "cuda":
        raise RuntimeError(f"CUDA graphs need a CUDA device, not {device}")
    if precision not in AUTOCAST:
        raise RuntimeError(f"CUDA graphs are not set up for precision {precision!r}")
    wrapper = _Forward(model, AUTOCAST[precision])
    sample = torch.zeros(shape, dtype=torch.long, device=device)
    # Warm-up passes of make_graphed_callables use torch.autograd.grad: the parameters' .grad stay as
    # they are.
    # allow_unused_input: a parameter the forward does not reach (an option switched off) gets no gradient
    return torch.cuda.make_graphed_callables(wrapper, (sample,), num_warmup_iters=3, allow_unused_input=True)
