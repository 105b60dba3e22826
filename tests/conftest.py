"""Test-session setup: Triton's interpreter without CUDA, few threads, GPU tests skipped without a GPU."""

import os

import pytest
import torch

HAS_CUDA = torch.cuda.is_available()

if not HAS_CUDA:
    # Triton reads this when it is first imported; tests import it only after this file runs.
    os.environ.setdefault("TRITON_INTERPRET", "1")


def _builtins_listed_once(interpreter) -> None:
    """Triton's interpreter patches `triton.language` again at every call of one @triton.jit function from another
    (`_patch_lang`), and each time lists every member of five modules with `inspect.getmembers` to find their
    builtins: 4 ms a call, 40% of a falcon-2 forward and backward at B = 2, T = 37 (cProfile, triton 3.9). The
    builtins' names are the same at every call, so they are listed once per module here and only those attributes
    are read again: the same attributes patched with the same members into the same scope. Left as it is where the
    interpreter's function is not the one this was written against."""
    original = getattr(interpreter, "_patch_builtin", None)
    code = getattr(original, "__code__", None)
    if code is None or code.co_varnames[:3] != ("pkg", "builder", "scope") or not hasattr(interpreter, "_patch_attr"):
        return
    import inspect

    is_builtin, patch_attr = interpreter.tl.core.is_builtin, interpreter._patch_attr
    names: dict[int, tuple[object, list[str]]] = {}

    def patch_builtin(pkg, builder, scope) -> None:
        held = names.get(id(pkg))
        if held is None or held[0] is not pkg:
            held = names[id(pkg)] = (pkg, [name for name, member in inspect.getmembers(pkg) if is_builtin(member)])
        for name in held[1]:
            member = getattr(pkg, name, None)
            if is_builtin(member):
                patch_attr(pkg, name, member, builder, scope)

    interpreter._patch_builtin = patch_builtin


def _no_overflow_checks(interpreter) -> None:
    """The interpreter checks every 32-bit integer add, sub and mul against overflow by doing it again in int64:
    half the time of a model's step on the kernels here (cProfile), for index arithmetic that stays far below 2^31
    at test shapes (a GPU compiles no such check outside debug mode). LAB_TEST_SANITIZE_OVERFLOW=1 keeps it."""
    builder = getattr(interpreter, "interpreter_builder", None)
    if os.environ.get("LAB_TEST_SANITIZE_OVERFLOW") == "1" or \
            not hasattr(getattr(builder, "options", None), "sanitize_overflow"):
        return
    import dataclasses

    builder.options = dataclasses.replace(builder.options, sanitize_overflow=False)


if os.environ.get("TRITON_INTERPRET") == "1":
    # the kernels' tests run under the interpreter, one Python call per operation of every program: two of its
    # costs that test nothing of the kernels, taken off (the eleven files of Triton tests at -n 2: 413 s before,
    # 240 s after, on the 2-core development machine, 2026-12-05)
    try:
        from triton.runtime import interpreter as _interpreter
    except ImportError:
        pass
    else:
        _builtins_listed_once(_interpreter)
        _no_overflow_checks(_interpreter)

# The test machines are small and shared: more threads than cores only adds contention. Under pytest-xdist
# (`-n 2`) the workers share the cores.
WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
torch.set_num_threads(max(1, min(2, (os.cpu_count() or 1) // WORKERS)))


@pytest.fixture(autouse=True)
def one_gpu_test_at_a_time(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory):
    """Under pytest-xdist, tests marked `gpu` take a lock the workers share: their timings and memory assume the
    device to themselves."""
    if not (HAS_CUDA and WORKERS > 1 and "gpu" in request.keywords):
        yield
        return
    from filelock import FileLock  # torch's own dependency

    with FileLock(str(tmp_path_factory.getbasetemp().parent / "gpu.lock")):
        yield


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip tests marked `gpu` when no CUDA device is present."""
    if HAS_CUDA:
        return
    skip = pytest.mark.skip(reason="needs a CUDA device")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """With LAB_TEST_FAILURES=<file>, every failure's report is appended to that file as soon as it happens: a run
    cut by a time limit (a device call's) before pytest's summary still names what failed and why."""
    path = os.environ.get("LAB_TEST_FAILURES")
    if not path or not report.failed:
        return
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"FAILED {report.nodeid} ({report.when}, {report.duration:.1f} s)\n{report.longreprtext}\n\n")
