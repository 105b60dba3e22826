"""``FalconAttention``: a Falcon fast-weight layer to drop into any model, as fla's layers are.

    from falcon_lab.mixers import FalconAttention

    layer = FalconAttention(hidden_size=768, num_heads=12, rule="falcon-1a", variant="3")
    y, _ = layer(x)                                       # x, y: [B, T, 768]
    y, cache = layer(prompt, use_cache=True)              # prefill in parallel, and the state after it
    y_t, cache = layer(x_t, cache=cache, use_cache=True)  # then any number of tokens at a time

Hidden states in, hidden states out; the rule, its paper variant and any option of ``FalconOptions``
(``window``, ``alignment``, ``timing``, ``backend``, ...) by keyword. It is the mixer the lab's language model
uses (``falcon_lab.mixers.falcon.FalconMixer``), built without the registry.
"""

from __future__ import annotations

from typing import Any

from torch import Tensor, nn

from falcon_lab.kernels import RULES, rule_spec
from falcon_lab.mixers.falcon import VARIANTS, FalconMixer, FalconOptions
from falcon_lab.mixers.options import parse_options


class FalconAttention(nn.Module):
    """A multi-head Falcon fast-weight layer ``[B, T, hidden_size] -> [B, T, hidden_size]``.

    ``rule``: one of ``kernels.RULES``; ``variant``: the paper's ``"1"``, ``"2"`` or ``"3"`` (QK-norm, gain
    and ridge, ``falcon_lab.mixers.falcon.VARIANTS``), or None for the options' own defaults; ``options``: any field of
    ``FalconOptions``, over the variant's.
    """

    def __init__(self, hidden_size: int, num_heads: int, rule: str = "falcon-1a", variant: str | None = "3",
                 **options: Any) -> None:
        super().__init__()
        try:
            rule_spec(rule)
        except ValueError:
            raise ValueError(f"FalconAttention: rule {rule!r} is not one of {', '.join(RULES)}") from None
        if variant is not None and variant not in VARIANTS:
            raise ValueError(f"FalconAttention: variant {variant!r} is not one of {', '.join(VARIANTS)} (or None)")
        name = rule if variant is None else f"{rule}.{variant}"
        opts = parse_options(name, FalconOptions, {**(VARIANTS[variant] if variant else {}), **options})
        self.hidden_size, self.num_heads, self.rule = hidden_size, num_heads, rule
        self.mixer = FalconMixer(hidden_size, num_heads, opts, rule, name)

    def forward(self, hidden_states: Tensor, cache: dict | None = None,
                use_cache: bool = False) -> tuple[Tensor, dict | None]:
        """The layer's output, and with ``use_cache`` (or a ``cache`` given) the cache after the last token,
        which a later call continues from exactly."""
        if hidden_states.dim() != 3 or hidden_states.shape[-1] != self.hidden_size:
            raise ValueError(f"FalconAttention: hidden_states must be [B, T, {self.hidden_size}], got "
                             f"{tuple(hidden_states.shape)}")
        if cache is None and not use_cache:
            return self.mixer(hidden_states), None
        if cache is None:
            cache = self.mixer.init_cache(hidden_states.shape[0], hidden_states.device, hidden_states.dtype)
        return self.mixer.forward_cached(hidden_states, cache)

    def extra_repr(self) -> str:
        return f"hidden_size={self.hidden_size}, num_heads={self.num_heads}, rule={self.rule!r}"
