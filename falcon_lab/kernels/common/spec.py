"""What a rule is: one ``RuleSpec`` per rule, and the registry every layer asks for it.

A spec holds a rule's traits and its forms, the functions themselves (``falcon_lab.kernels.falcon.rules`` declares
the six Falcon rules). The kernels, the mixers, the benchmarks and the tables read the traits off the spec and
never decide them from the name; registering a spec (``register_rule``) is the one step that adds a rule to all of
them. ``RULES`` and ``FUSED_RULES`` are live views of the registry: they name the rules registered at the time
they are read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

FAMILIES = ("regression", "inner_product", "window")
GAIN_BOUNDS = ("ridge", "energy")

# every form takes (q, k, v, beta, lam, cfg, state, fresh) and returns (o, final state); chunk forms also take
# chunk_size, triton forms chunk_size and cu_seqlens (falcon_lab.kernels.falcon.dispatch)
Form = Callable[..., tuple]


@dataclass(frozen=True)
class RuleSpec:
    """One rule: its name, traits and forms.

    name: the registry name (``falcon-1a``), as the op's ``rule=`` and the mixer registry take it.
    family: the folder of ``falcon_lab/kernels`` its own forms live in (``regression``, ``inner_product``, ``window``).
    regression: it writes the residual ``y − Sᵀx`` (falcon-1/2/3); else the target ``y`` itself (the A rules).
    per_channel: one gain and one carry per value channel (falcon-2/2a): β ``[B, T, H, Dv]``.
    windowed: one step on the mean loss of a sliding window of B pairs (falcon-3/3a).
    gain_bound: what ctxη's bound covers when the mixer's ``eta_bound`` is ``auto``: ``ridge`` (the step size
        times energy plus ridge, where the ridge moves the transition's eigenvalue: the regression rules) or
        ``energy`` (the step size times the key energy: the inner-product rules, whose carry alone is γ).
    recurrent, masked, chunk: the exact oracle, the O(T²) masked form and the chunk-parallel form.
    triton: the fused form (None: the rule has none, ``backend="triton"`` refuses it).
    triton_packed: the fused form for fresh sequences, outputs alone (rows, or packed sequences with no padding),
        taking ``cu_seqlens`` or None (None: they go through ``triton``, packed sequences one to a row).
    auto: whether ``backend="auto"`` may pick ``triton`` for it.
    fused_max_window: the widest window ``triton`` takes (None: any).
    fused_min_decay_floor: the smallest decay floor ``triton`` takes (None: any).
    chunk_by_window: its chunk form solves one (C·B) × (C·B) system per chunk, so the mixer shortens its chunks as
        the window grows (falcon-3).
    by_sample_id: ``triton`` takes rows of samples told apart by per-token sample ids (``sample_id``), the rows
        as they are; other rules run such samples as packed sequences (falcon-1a).
    """

    name: str
    family: str
    regression: bool
    per_channel: bool
    windowed: bool
    gain_bound: str
    recurrent: Form
    masked: Form
    chunk: Form
    triton: Form | None = None
    triton_packed: Callable[..., object] | None = None
    auto: bool = True
    fused_max_window: int | None = None
    fused_min_decay_floor: float | None = None
    chunk_by_window: bool = False
    by_sample_id: bool = False
    summary: str = ""

    def __post_init__(self) -> None:
        if self.family not in FAMILIES:
            raise ValueError(f"rule {self.name!r}: family {self.family!r}; accepted: {', '.join(FAMILIES)}")
        if self.gain_bound not in GAIN_BOUNDS:
            raise ValueError(f"rule {self.name!r}: gain_bound {self.gain_bound!r}; accepted: {', '.join(GAIN_BOUNDS)}")

    def form(self, backend: str) -> Form:
        """The function that runs this rule on ``backend`` (ValueError where it has none)."""
        forms = {"recurrent": self.recurrent, "masked": self.masked, "chunk": self.chunk, "triton": self.triton}
        if backend not in forms:
            raise ValueError(f"backend {backend!r}; accepted: {', '.join(forms)}")
        fn = forms[backend]
        if fn is None:
            raise ValueError(f"backend={backend!r} covers {', '.join(FUSED_RULES)}; for {self.name} use "
                             f"backend='chunk'")
        return fn


_SPECS: dict[str, RuleSpec] = {}


def register_rule(spec: RuleSpec) -> RuleSpec:
    """Add ``spec`` to the registry (ValueError for a name already taken by another spec); returns it."""
    if not isinstance(spec, RuleSpec):
        raise TypeError(f"register_rule takes a RuleSpec, got {type(spec).__name__}")
    held = _SPECS.get(spec.name)
    if held is not None and held != spec:
        raise ValueError(f"rule {spec.name!r} is registered already")
    _SPECS[spec.name] = spec
    return spec


def unregister_rule(name: str) -> None:
    """Remove the rule ``name`` from the registry (a test's own rule, after the test)."""
    _SPECS.pop(name, None)


def rule_spec(rule: str | RuleSpec) -> RuleSpec:
    """The spec of the registered rule ``rule`` (a spec passes through); ValueError naming the accepted ones."""
    if isinstance(rule, RuleSpec):
        return rule
    spec = _SPECS.get(rule)
    if spec is None:
        raise ValueError(f"rule={rule!r}; accepted: {', '.join(_SPECS)}")
    return spec


def rule_specs() -> tuple[RuleSpec, ...]:
    """Every registered spec, in the order registered."""
    return tuple(_SPECS.values())


class RuleNames(Sequence[str]):
    """The names of the registered rules that pass ``keep``, read at each use (a tuple's behaviour otherwise)."""

    def __init__(self, keep: Callable[[RuleSpec], bool] = lambda spec: True) -> None:
        self._keep = keep

    def _names(self) -> tuple[str, ...]:
        return tuple(name for name, spec in _SPECS.items() if self._keep(spec))

    def __getitem__(self, i):  # type: ignore[override]
        return self._names()[i]

    def __len__(self) -> int:
        return len(self._names())

    def __iter__(self) -> Iterator[str]:
        return iter(self._names())

    def __contains__(self, name: object) -> bool:
        return name in self._names()

    def __add__(self, other: Sequence[str]) -> tuple[str, ...]:
        return self._names() + tuple(other)

    def __radd__(self, other: Sequence[str]) -> tuple[str, ...]:
        return tuple(other) + self._names()

    def __eq__(self, other: object) -> bool:
        return self._names() == (tuple(other) if isinstance(other, (tuple, list, RuleNames)) else other)

    def __hash__(self) -> int:
        return hash(self._names())

    def __repr__(self) -> str:
        return repr(self._names())


RULES = RuleNames()
FUSED_RULES = RuleNames(lambda spec: spec.triton is not None)
