"""The Triton launches an op makes, recorded rather than run (``recorded``).

Inside ``recorded()`` every ``@triton.jit`` launch is kept (the kernel, its positional and keyword arguments) and
nothing runs, and the fused forms take CPU tensors: their host code picks kernels, constants and launches as it does
on a GPU (Triton's interpreter stays off, so the products' precision is the GPU's), while the tensors it allocates
stay as allocated. ``lab bench registers`` compiles what it records for an sm_90 GPU.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Launch:
    """One recorded launch: the kernel (a ``triton.runtime.jit.JITFunction``), its positional arguments and its
    keyword ones (constants and options such as ``num_warps``)."""

    fn: Any
    args: tuple
    kwargs: dict

    @property
    def name(self) -> str:
        return self.fn.fn.__name__

    def key(self) -> tuple:
        """Launches that compile alike: the kernel, its keyword arguments, its arguments' dtypes or types."""
        kinds = tuple(str(getattr(a, "dtype", type(a).__name__)) for a in self.args)
        return self.name, kinds, tuple(sorted((k, repr(v)) for k, v in self.kwargs.items()))

    def values(self) -> dict[str, Any]:
        """Every parameter's value by name (the first ones by position, as Python binds them)."""
        return dict(zip(self.fn.arg_names, self.args), **{k: v for k, v in self.kwargs.items() if k not in OPTIONS})


OPTIONS = ("num_warps", "num_stages")  # a launch's options, not the kernel's parameters


@contextmanager
def recorded() -> Iterator[list[Launch]]:
    """Record every Triton launch made inside the block, run none, and let the fused forms take CPU tensors."""
    from triton.runtime.jit import JITFunction

    from falcon_lab.kernels.common import checks

    _import_forms()  # imported first: every module that reads ``interpreting`` by name keeps the real one
    launches: list[Launch] = []
    run, interpreting = JITFunction.run, checks.interpreting

    def record(self, *args, grid, warmup, **kwargs):
        launches.append(Launch(self, args, dict(kwargs)))

    JITFunction.run = record
    checks.interpreting = lambda: True  # the fused forms' refusal asks for CUDA or the interpreter
    try:
        yield launches
    finally:
        JITFunction.run, checks.interpreting = run, interpreting


def _import_forms() -> None:
    import falcon_lab.kernels.conv.triton_short_conv  # noqa: F401
    import falcon_lab.kernels.inner_product.fused  # noqa: F401
    import falcon_lab.kernels.regression.fused  # noqa: F401
    import falcon_lab.kernels.regression.triton_launch  # noqa: F401
    import falcon_lab.kernels.window.fused  # noqa: F401
