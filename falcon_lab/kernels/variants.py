"""The kernels' implementation variants a process runs, read and set in one place.

- ``conv``: the short convolution's backward form, ``tiles`` or ``serial``
  (``falcon_lab.kernels.conv.triton_short_conv.BWD_FORM``);
- ``inverse``: the UT transform's inverse, ``substitution`` or ``doubling`` (``regression.triton_launch.INVERSE``);
- ``launch``: the regression kernels' and falcon-3's blocks and warps, ``kernel:KEY=N,...;kernel:...``
  (``regression.triton_launch.parse_launch``);
- ``falcon3-glue``: falcon-3's glue by sample id on a GPU, ``eager`` or ``compiled`` (``window.fused.GLUE``).

Each starts from the environment (``LAB_CONV_FORM``, ``LAB_TRIL_INVERSE``, ``LAB_LAUNCH``, ``LAB_FALCON3_GLUE``);
``using`` sets them for a block, as ``lab bench step --kernels NAME=VALUE`` does, so one process times a step in
each. None of them changes what a kernel computes, only how: they are no part of a run's configuration.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from falcon_lab.kernels.common.checks import SettingError

NAMES = ("conv", "inverse", "launch", "falcon3-glue")


def parse(words: Sequence[str]) -> dict[str, str]:
    """``NAME=VALUE`` words as a dict, each value checked; SettingError (one line) for what is not one."""
    from falcon_lab.kernels.conv import triton_short_conv
    from falcon_lab.kernels.regression import triton_launch
    from falcon_lab.kernels.window import fused

    picked: dict[str, str] = {}
    for word in words:
        name, eq, value = word.partition("=")
        if name not in NAMES or not eq:
            raise SettingError(f"--kernels: expected NAME=VALUE with NAME one of {', '.join(NAMES)}, got {word!r}")
        if name == "conv":
            triton_short_conv.form(value)
        elif name == "inverse":
            triton_launch.inverse(value)
        elif name == "launch":
            triton_launch.parse_launch(value)
        elif name == "falcon3-glue":
            fused.glue(value)
        picked[name] = value
    return picked


def current() -> dict[str, str]:
    """The variants in force, as ``parse`` takes them."""
    from falcon_lab.kernels.conv import triton_short_conv as conv
    from falcon_lab.kernels.regression import triton_launch as launch
    from falcon_lab.kernels.window import fused

    overrides = ";".join(f"{k}:" + ",".join(f"{key}={v}" for key, v in kv.items())
                         for k, kv in launch.LAUNCH_OVERRIDES.items())
    return {"conv": conv.BWD_FORM, "inverse": launch.INVERSE, "launch": overrides or "default",
            "falcon3-glue": fused.GLUE}


@contextmanager
def using(picked: dict[str, str]) -> Iterator[None]:
    """The variants of ``picked`` (``parse``'s) in force inside the block, those before restored after it."""
    from falcon_lab.kernels.conv import triton_short_conv as conv
    from falcon_lab.kernels.regression import triton_launch as launch
    from falcon_lab.kernels.window import fused

    before = conv.BWD_FORM, launch.INVERSE, dict(launch.LAUNCH_OVERRIDES), fused.GLUE
    try:
        if "conv" in picked:
            conv.BWD_FORM = conv.form(picked["conv"])
        if "inverse" in picked:
            launch.INVERSE = launch.inverse(picked["inverse"])
        if "launch" in picked:
            launch.LAUNCH_OVERRIDES.clear()
            launch.LAUNCH_OVERRIDES.update(launch.parse_launch(picked["launch"]))
        if "falcon3-glue" in picked:
            fused.GLUE = fused.glue(picked["falcon3-glue"])
        yield
    finally:
        conv.BWD_FORM, launch.INVERSE, fused.GLUE = before[0], before[1], before[3]
        launch.LAUNCH_OVERRIDES.clear()
        launch.LAUNCH_OVERRIDES.update(before[2])
