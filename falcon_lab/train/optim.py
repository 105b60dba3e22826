"""AdamW over the model's parameter groups and the warm-up + cosine learning-rate schedule."""

from __future__ import annotations

import math

import torch
from torch import nn

from falcon_lab.config import OptimConfig


def lr_factor(step: int, warmup_steps: int, max_steps: int, min_lr_ratio: float) -> float:
    """Multiplier of the base lr at optimiser step `step` (0-based).

    Linear warm-up over the first `warmup_steps` steps (step 0 takes lr/warmup_steps), then cosine
    decay that reaches `min_lr_ratio` at `max_steps` and stays there.
    """
    if step < warmup_steps:
        return (step + 1) / warmup_steps
    progress = min(1.0, (step - warmup_steps) / max(1, max_steps - warmup_steps))
    return min_lr_ratio + (1.0 - min_lr_ratio) * 0.5 * (1.0 + math.cos(math.pi * progress))


def parameter_groups(model: nn.Module, lr: float, weight_decay: float) -> list[dict]:
    """The model's own groups when it declares them (decay split, μP lr multipliers), else a split
    where every parameter with fewer than two axes (norm gains, biases, scalars) takes no decay."""
    if hasattr(model, "parameter_groups"):
        return model.parameter_groups(lr, weight_decay)
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    return [{"params": decay, "weight_decay": weight_decay}, {"params": rest, "weight_decay": 0.0}]


def make_optimizer(
    model: nn.Module, optim: OptimConfig, max_steps: int, fused: bool = True
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LambdaLR]:
    """AdamW with the configured betas and decay groups, and its per-step LambdaLR schedule."""
    groups = parameter_groups(model, optim.lr, optim.weight_decay)
    # fused: one kernel for the whole update, and a step flagged in `found_inf` is skipped on the device
    optimizer = torch.optim.AdamW(groups, lr=optim.lr, betas=optim.betas, weight_decay=optim.weight_decay,
                                  fused=fused)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_factor(step, optim.warmup_steps, max_steps, optim.min_lr_ratio)
    )
    return optimizer, schedule
