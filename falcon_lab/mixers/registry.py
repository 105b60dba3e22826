"""The mixer registry: short names (``falcon-1a.3``, ``transformer``, ``mamba2``...) -> builders.

``build_mixer(name, d_model, n_heads, **options)`` builds one; a registry name is a mixer class plus a
preset of option defaults (the paper's ``.1/.2/.3`` variants are presets of the Falcon mixer). Options
given explicitly override the preset; unknown names and options raise a one-line ValueError.

``MIXERS`` is read live: every rule registered with ``falcon_lab.kernels.register_rule`` is a mixer of its own
name (the ``.3`` defaults), beside the baselines and the paper's evaluated variants.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from falcon_lab.kernels import RuleSpec, rule_spec, rule_specs
from falcon_lab.mixers import layers
from falcon_lab.mixers.deltanet import DeltaNet, DeltaNetOptions, GatedDeltaNetOptions
from falcon_lab.mixers.falcon import VARIANTS, FalconMixer, FalconOptions
from falcon_lab.mixers.layers import Mixer
from falcon_lab.mixers.mamba2 import Mamba2, Mamba2Options
from falcon_lab.mixers.options import parse_options
from falcon_lab.mixers.retnet import Retention, RetNetOptions
from falcon_lab.mixers.transformer import Attention, TransformerOptions


@dataclass(frozen=True)
class MixerBuilder:
    """Builds the mixer ``name``: ``builder(d_model, n_heads, **options) -> Mixer``."""

    name: str
    make: Callable[[int, int, Any, str], Mixer]
    options: type
    preset: Mapping[str, Any] = field(default_factory=dict)
    summary: str = ""

    def __call__(self, d_model: int, n_heads: int, **options: Any) -> Mixer:
        opts = parse_options(self.name, self.options, {**self.preset, **options})
        return self.make(d_model, n_heads, opts, self.name)

    def defaults(self) -> dict[str, Any]:
        """Every option of this name with its default (preset applied)."""
        return dataclasses.asdict(parse_options(self.name, self.options, dict(self.preset)))


def _falcon(spec: RuleSpec) -> Callable[[int, int, FalconOptions, str], Mixer]:
    def make(d_model: int, n_heads: int, opts: FalconOptions, name: str) -> Mixer:
        return FalconMixer(d_model, n_heads, opts, spec, name)
    make.resets_at_samples = FalconMixer.resets_at_samples  # type: ignore[attr-defined]
    make.spec = spec  # type: ignore[attr-defined]
    return make


# the paper's evaluated variants (rule, variant): registry names ``falcon-1a.1`` ...
PAPER_VARIANTS = (("falcon-1a", "1"), ("falcon-1a", "2"), ("falcon-1a", "3"), ("falcon-3a", "3"), ("falcon-1", "3"))


def _falcon_entries() -> list[MixerBuilder]:
    """Every registered rule with the ``.3`` defaults, then the paper's evaluated variants."""
    entries = [MixerBuilder(spec.name, _falcon(spec), FalconOptions, summary=f"{spec.name} fast weights, .3 defaults")
               for spec in rule_specs()]
    for rule, variant in PAPER_VARIANTS:
        entries.append(MixerBuilder(f"{rule}.{variant}", _falcon(rule_spec(rule)), FalconOptions, VARIANTS[variant],
                                    summary=f"{rule} fast weights, paper variant .{variant}"))
    return entries


def _baseline_entries() -> list[MixerBuilder]:
    return [
        MixerBuilder("transformer", Attention, TransformerOptions,
                     summary="softmax attention with RoPE (SDPA), KV cache for generation"),
        MixerBuilder("retnet", Retention, RetNetOptions,
                     summary="multi-scale retention: fixed per-head decays, RoPE, group norm, swish gate"),
        MixerBuilder("mamba2", Mamba2, Mamba2Options,
                     summary="Mamba-2 SSD: conv, input-dependent Δ, per-head A, D skip, gated RMSNorm"),
        MixerBuilder("deltanet", DeltaNet, DeltaNetOptions,
                     summary="delta rule with ℓ2-normalised q/k, β = σ(·), short conv, output norm"),
        MixerBuilder("gated-deltanet", DeltaNet, GatedDeltaNetOptions,
                     summary="gated delta rule: DeltaNet plus a Mamba-style forget gate and output gate"),
    ]


_BASELINES = _baseline_entries()


class _Mixers(Mapping[str, MixerBuilder]):
    """The registry, read at each use: the baselines, then a builder for every registered rule and variant."""

    def _table(self) -> dict[str, MixerBuilder]:
        specs = rule_specs()
        if getattr(self, "_specs", None) != specs:  # rebuilt only when a rule was registered or removed
            self._specs, self._built = specs, {b.name: b for b in (*_BASELINES, *_falcon_entries())}
        return self._built

    def __getitem__(self, name: str) -> MixerBuilder:
        return self._table()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._table())

    def __len__(self) -> int:
        return len(self._table())


MIXERS: Mapping[str, MixerBuilder] = _Mixers()


def masks_samples(name: str) -> bool:
    """Whether mixer ``name`` takes an attention mask that keeps the samples of a packed row apart
    (``forward(x, mask=...)``; ``PositionsConfig.sample_end``)."""
    return name in MIXERS and bool(getattr(MIXERS[name].make, "masks_samples", False))


def resets_at_samples(name: str) -> bool:
    """Whether mixer ``name`` restarts its state and short convolutions at every sample of a packed row
    (``forward(x, samples=...)`` with the ``sample_index`` of each token; ``PositionsConfig.sample_end``)."""
    return name in MIXERS and bool(getattr(MIXERS[name].make, "resets_at_samples", False))


def samples_by_id(name: str, options: Mapping[str, Any] | None = None) -> bool:
    """Whether mixer ``name`` (built with ``options``) runs isolated samples on a GPU's fused kernels by their ids
    (``layers.SAMPLE_IDS``, on unless ``LAB_SAMPLE_IDS=0``): the rows as they are, so a step's work follows its
    batch's shape alone and reads nothing on the host."""
    if name not in MIXERS or {**MIXERS[name].preset, **(options or {})}.get("backend", "auto") not in ("auto",
                                                                                                     "triton"):
        return False
    spec = getattr(MIXERS[name].make, "spec", None)  # the rule whose kernels the mixer runs
    return layers.SAMPLE_IDS and spec is not None and spec.by_sample_id


def build_mixer(name: str, d_model: int, n_heads: int, **options: Any) -> Mixer:
    """Build the registered mixer ``name`` for width ``d_model`` with ``n_heads`` heads."""
    if name not in MIXERS:
        raise ValueError(f"unknown mixer {name!r}; accepted: {', '.join(MIXERS)}")
    return MIXERS[name](d_model, n_heads, **options)


def default_options(name: str) -> dict[str, Any]:
    """The full option set of mixer ``name`` with its defaults (for recording a run's configuration)."""
    if name not in MIXERS:
        raise ValueError(f"unknown mixer {name!r}; accepted: {', '.join(MIXERS)}")
    return MIXERS[name].defaults()


__all__ = ["MIXERS", "MixerBuilder", "build_mixer", "default_options"]
