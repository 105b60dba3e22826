"""The host's facts of packed sequences (`falcon_lab.kernels.common.packed`): read from the device once per `cu_seqlens`
tensor, not once per layer, and never stale."""

from __future__ import annotations

import os
import traceback
from collections import Counter

import pytest
import torch

import falcon_lab.kernels.common.packed as packed
from falcon_lab.kernels.common import grid
from falcon_lab.kernels.common.triton_helpers import chunk_table
from falcon_lab.mixers import LanguageModel, LMConfig, PositionsConfig
from falcon_lab.tasks.addition.vocab import EOS, VOCAB_SIZE, encode


def test_a_fact_is_made_once_per_tensor_and_again_after_an_in_place_change() -> None:
    made = []
    cu = torch.tensor([0, 3, 7, 12])
    make = lambda: made.append(1) or len(made)  # noqa: E731
    assert packed.memo(cu, "x", make) == 1 and packed.memo(cu, "x", make) == 1
    assert packed.memo(cu, "y", make) == 2  # another fact of the same tensor
    assert packed.memo(cu.clone(), "x", make) == 3  # equal values, another tensor
    cu[1] = 4  # in place: the version moves, the facts are made again
    assert packed.memo(cu, "x", make) == 4
    with torch.inference_mode():
        frozen = torch.tensor([0, 2])
    assert packed.memo(frozen, "x", make) == 5 and packed.memo(frozen, "x", make) == 6  # no version: not kept


def test_the_facts_of_cu_seqlens() -> None:
    cu = torch.tensor([0, 3, 7, 12, 100], dtype=torch.int32)
    assert packed.offsets(cu) == (0, 3, 7, 12, 100)
    assert packed.longest(cu) == 88
    assert packed.chunk_count(cu, 16) == 1 + 1 + 1 + 6
    indices, offsets = chunk_table(cu, 16)
    assert offsets.tolist() == [0, 1, 2, 3, 9] and indices.shape == (9, 2)
    assert indices[3:].tolist() == [[3, c] for c in range(6)]
    assert grid.sequence_groups(cu, 2, 16) == [(0, 4)] == grid.sequence_groups(packed.offsets(cu), 2, 16)


KERNELS = ["nonzero", "to_host"]  # the samples' bounds found, then copied to the host
ROWS = ["_local_scalar_dense"] * 2  # the samples laid one to a row (SampleRows): their count and longest


@pytest.mark.parametrize(("mixer", "backend", "expected"), [
    *((mixer, "triton", KERNELS) for mixer in ("falcon-1a", "falcon-3", "falcon-3a", "deltanet", "gated-deltanet",
                                                "retnet")),
    ("mamba2", "chunk", ROWS)])
def test_a_model_over_packed_samples_reads_the_device_on_the_host_once_a_step_whatever_its_depth(
        mixer: str, backend: str, expected: list[str], monkeypatch: pytest.MonkeyPatch) -> None:
    """On a GPU each host read of a device tensor waits for the device: the samples' bounds are found once (one
    `nonzero`) and copied to the host once a forward and backward pass, for one layer as for two (each mixer's
    way onto the kernels: falcon-1's, falcon-1a's, falcon-3's rows by length, falcon-3a's packed form, the gated
    delta rule's, decayed attention's; and the samples laid one to a row for the chunked forms), with the samples as
    packed sequences (``LAB_SAMPLE_IDS=0``; by id they read nothing, below)."""
    from falcon_lab.mixers import layers

    monkeypatch.setattr(layers, "SAMPLE_IDS", False)
    assert host_reads(mixer, backend, monkeypatch) == {1: expected, 2: expected}


@pytest.mark.parametrize("mixer", ["falcon-1a", "retnet"])
def test_samples_by_id_on_the_kernels_read_nothing_on_the_host(mixer: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """falcon-1a's rule and decayed attention (RetNet's; Mamba-2's is the same call) over packed samples by their ids
    (``falcon_lab.mixers.layers.SAMPLE_IDS``): the rows as they are, no bounds found or copied, no count or length
    read: no host read at all, for one layer as for two."""
    from falcon_lab.mixers import layers

    monkeypatch.setattr(layers, "SAMPLE_IDS", True)
    assert host_reads(mixer, "triton", monkeypatch) == {1: [], 2: []}


def host_reads(mixer: str, backend: str, monkeypatch: pytest.MonkeyPatch) -> dict[int, list[str]]:
    """The host's reads of device tensors (by name) in a forward and backward pass of a model of one and of two
    layers over one row of two samples, after a warm-up pass."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the kernels' path on a CPU needs Triton's interpreter")
    from torch.utils._python_dispatch import TorchDispatchMode

    waits: list[str] = []

    def wait(what: str) -> None:  # Triton's interpreter reads its launches' tensors on the host: not a GPU's wait
        if not any(f"{os.sep}triton{os.sep}" in frame.filename for frame in traceback.extract_stack()):
            waits.append(what)

    read = packed.to_host
    monkeypatch.setattr(packed, "to_host", lambda t: wait("to_host") or read(t))
    tolist = torch.Tensor.tolist
    monkeypatch.setattr(torch.Tensor, "tolist", lambda t: wait("tolist") or tolist(t))

    class Waits(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            if func.overloadpacket.__name__ in ("_local_scalar_dense", "nonzero", "masked_select", "unique"):
                wait(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    tokens = torch.tensor([encode("12+34=640") + [EOS] + encode("5+6=11") + [EOS]])  # one row of two samples
    counts = {}
    for layers in (1, 2):
        torch.manual_seed(0)
        model = LanguageModel(LMConfig(vocab_size=VOCAB_SIZE, d_model=32, n_layers=layers, n_heads=2, mixer=mixer,
                                       mixer_options={"backend": backend}, positions=PositionsConfig(sample_end=EOS)))
        model(tokens.clone()).float().sum().backward()  # a warm-up pass: what a process does once is not a step's
        waits.clear()
        with Waits():
            model(tokens).float().sum().backward()
        counts[layers] = sorted(waits)
    return counts


@pytest.mark.gpu
@pytest.mark.parametrize("mixer", ["falcon-1a.3", "falcon-3", "falcon-3a.3", "deltanet", "gated-deltanet", "retnet",
                                   "mamba2"])
def test_on_a_gpu_a_step_over_packed_samples_synchronises_as_often_for_one_layer_as_for_two(mixer: str) -> None:
    """CUDA's own count (`torch.cuda.set_sync_debug_mode`: every operation that makes the host wait for the device,
    pageable copies included) of one forward and backward pass in bf16 autocast on the kernels `auto` picks, after a
    warm-up pass (Triton's compilation): the same for one layer as for two, and a few in all."""
    import warnings

    first, second = encode("12+34=640") + [EOS], encode("5+6=11") + [EOS]
    tokens = torch.tensor([first + second, second + first] * 4, device="cuda")
    counts = {}
    for layers in (1, 2):
        torch.manual_seed(0)
        model = LanguageModel(LMConfig(vocab_size=VOCAB_SIZE, d_model=64, n_layers=layers, n_heads=2, mixer=mixer,
                                       positions=PositionsConfig(sample_end=EOS))).cuda()

        def step() -> None:
            with torch.autocast("cuda", dtype=torch.bfloat16):
                logits = model(tokens)
            logits.float().sum().backward()

        step()  # compiles the kernels
        torch.cuda.synchronize()
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            torch.cuda.set_sync_debug_mode("warn")
            try:
                step()
            finally:
                torch.cuda.set_sync_debug_mode("default")
        # "called a synchronizing CUDA operation": the once-a-process notice that the mode is a prototype
        # ("Synchronization debug mode is a prototype feature ...") is no synchronisation (it failed the first case
        # on an H100, records/bench/gpu-checks-2026-12-05)
        counts[layers] = [str(w.message).splitlines()[0] for w in caught
                          if "called a synchronizing" in str(w.message)]
    assert len(counts[1]) == len(counts[2]) <= 4, counts


@pytest.mark.parametrize("alignment", ["shifted", "same_time"])
def test_falcon3a_packed_windows_are_made_once_per_cu_seqlens_for_every_layer(alignment: str) -> None:
    """falcon-3a's packed form cuts its windows at every sequence's start by masks of `cu_seqlens` alone: the
    first layer of a step makes them, the next ones reuse them (no position, comparison or mask ops of their own),
    with the same outputs."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the kernels' path on a CPU needs Triton's interpreter")
    from torch.utils._python_dispatch import TorchDispatchMode

    from falcon_lab.kernels import fast_weight_rule

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.names: list[str] = []

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names.append(func.overloadpacket.__name__)
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    T, H, D = 40, 2, 16
    q, k, v = (torch.randn(1, T, H, D) for _ in range(3))
    beta, lam = torch.rand(1, T, H) + 0.2, torch.rand(1, T, H)
    cu = torch.tensor([0, 5, 6, 19, 33, 40])
    runs, outs = [], []
    for _ in range(2):  # two layers of one step: one cu_seqlens tensor
        with Ops() as ops:
            o, _ = fast_weight_rule(q, k, v, beta, lam, rule="falcon-3a", window=3, alignment=alignment,
                                    backend="triton", chunk_size=16, cu_seqlens=cu)
        runs.append(ops.names)
        outs.append(o)
    torch.testing.assert_close(outs[0], outs[1], rtol=0, atol=0)
    saved = Counter(runs[0])
    saved.subtract(runs[1])  # what the second layer no longer runs, and nothing it runs more of
    assert min(saved.values()) >= 0, saved
    assert saved["repeat_interleave"] >= 1 and saved["ge"] >= 3 and saved["bitwise_and"] == 3, saved


def test_falcon3_packed_sequences_go_to_rows_and_back_by_one_gather_a_tensor_whatever_the_runs() -> None:
    """falcon-3's kernels take packed sequences one to a row, in up to four runs of like lengths: q, k, v, β and λ
    are laid out by one gather each and the outputs brought back by one, not by ops per run."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("the kernels' path on a CPU needs Triton's interpreter")
    from torch.utils._python_dispatch import TorchDispatchMode

    from falcon_lab.kernels import fast_weight_rule
    from falcon_lab.kernels.falcon.api import _length_groups

    class Ops(TorchDispatchMode):
        def __init__(self) -> None:
            super().__init__()
            self.names: Counter = Counter()

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            self.names[func.overloadpacket.__name__] += 1
            return func(*args, **(kwargs or {}))

    torch.manual_seed(0)
    lengths = [3, 9, 4, 12, 6, 2, 7, 5]
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()])
    assert len(_length_groups(tuple(cu.tolist()))) == 4
    T, H, D = sum(lengths), 2, 16
    q, k, v = (torch.randn(1, T, H, D) for _ in range(3))
    beta, lam = torch.rand(1, T, H) + 0.2, torch.rand(1, T, H)
    ins = [t.requires_grad_() for t in (q, k, v, beta, lam)]
    with Ops() as ops:
        o, _ = fast_weight_rule(*ins, rule="falcon-3", window=3, backend="triton", chunk_size=16, cu_seqlens=cu)
    assert ops.names["index_select"] == 6 and not ops.names["index"], ops.names
    g = torch.randn_like(o)
    with Ops() as ops:  # back by the inverse gathers, not autograd's scatter-add of an index (a sort, a serial pad)
        grads = torch.autograd.grad(o, ins, g)
    assert ops.names["index_select"] == 6 and not ops.names["index_put"] and not ops.names["index_add"], ops.names
    # the same gradients as the kernels' one call per sequence
    b = cu.tolist()
    for n, (s, e) in enumerate(zip(b, b[1:])):
        part = [t.detach()[:, s:e].clone().requires_grad_() for t in (q, k, v, beta, lam)]
        o_n, _ = fast_weight_rule(*part, rule="falcon-3", window=3, backend="triton", chunk_size=16)
        torch.testing.assert_close(o[:, s:e], o_n, rtol=1e-5, atol=1e-5)
        for got, want in zip(grads, torch.autograd.grad(o_n, part, g[:, s:e])):
            torch.testing.assert_close(got[:, s:e], want, rtol=1e-4, atol=1e-5, msg=f"sequence {n}")
