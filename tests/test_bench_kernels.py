"""`lab bench kernels`: the floors it divides by, its ratios, and its refusals on a machine without a GPU."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

from falcon_lab.bench.kernels import (
    ANCHORS,
    BenchError,
    _ratios,
    bytes_moved,
    flops,
    parse_shape,
)


def test_parse_shape():
    assert parse_shape("8,2048,12,64") == (8, 2048, 12, 64)
    assert parse_shape("1x16384x16x128") == (1, 16384, 16, 128)
    for bad in ("8,2048,12", "a,b,c,d", "0,1,1,1"):
        with pytest.raises(BenchError, match="shape"):
            parse_shape(bad)


def test_flop_counts_follow_the_docstring():
    B, T, H, D = 2, 128, 3, 64
    C = 64
    tokens = B * T * H
    assert flops("linear", (B, T, H, D), "fwd") == tokens * (4 * D * D + C * 2 * D)
    assert flops("linear", (B, T, H, D), "fwd+bwd") == 3 * flops("linear", (B, T, H, D), "fwd")
    # falcon-3a, B = 4: one delayed pass and the band of the other 3 pairs
    assert flops("linear_window", (B, T, H, D), "fwd") == flops("linear", (B, T, H, D), "fwd") + tokens * 3 * 4 * D
    delta = tokens * (6 * D * D + C * 5 * D + 2 * C * C / 3)
    assert flops("delta", (B, T, H, D), "fwd") == pytest.approx(delta)
    assert flops("delta_per_channel", (B, T, H, D), "fwd") > flops("delta", (B, T, H, D), "fwd")
    assert flops("softmax", (B, T, H, D), "fwd") == tokens * 2 * T * D
    assert flops("softmax", (B, T, H, D), "fwd+bwd") == 3.5 * flops("softmax", (B, T, H, D), "fwd")


def test_byte_floor_counts_inputs_and_output():
    inputs = {"q": torch.zeros(2, 8, dtype=torch.bfloat16), "lam": torch.zeros(2, dtype=torch.float32)}
    in_bytes = 2 * 8 * 2 + 2 * 4
    assert bytes_moved(inputs, 100, "fwd") == in_bytes + 100
    assert bytes_moved(inputs, 100, "fwd+bwd") == 3 * in_bytes + 2 * 100


def test_ratios_are_taken_at_the_same_shape_and_mode():
    anchor = ANCHORS[0]
    rows = [
        {"shape": "1x2x3x4", "mode": "fwd", "op": anchor, "ms": 2.0},
        {"shape": "1x2x3x4", "mode": "fwd", "op": "falcon-1", "ms": 1.0},
        {"shape": "1x2x3x4", "mode": "fwd+bwd", "op": "falcon-1", "ms": 5.0},
        {"shape": "9x2x3x4", "mode": "fwd", "op": "falcon-1", "ms": 1.0},
    ]
    _ratios(rows)
    assert rows[1][f"x_{anchor}"] == 0.5
    assert rows[2][f"x_{anchor}"] is None and rows[3][f"x_{anchor}"] is None


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the refusal on a machine without a GPU")
def test_without_a_gpu_it_says_so_and_writes_nothing(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "falcon_lab", "bench", "kernels", "--out", str(tmp_path)],
                          capture_output=True, text=True)
    assert proc.returncode == 1 and "CUDA" in proc.stderr
    assert not list(tmp_path.iterdir())


def test_bad_options_are_named(tmp_path):
    for args, word in ((["--dtype", "fp8"], "dtype"), (["--rules", "falcon-4"], "falcon-4")):
        proc = subprocess.run([sys.executable, "-m", "falcon_lab", "bench", "kernels", "--out", str(tmp_path), *args],
                              capture_output=True, text=True)
        assert proc.returncode == 1 and word in proc.stderr


def test_a_kernel_variant_that_is_not_one_is_refused_in_one_line(tmp_path):
    """--kernels as `lab bench step` takes it: a bad variant refused with exit 2 before anything is measured or
    written."""
    out = tmp_path / "out"
    for word, said in (("launch=f9:BK=1", "unknown kernel"), ("falcon3-glue=jit", "got 'jit'")):
        proc = subprocess.run([sys.executable, "-m", "falcon_lab", "bench", "kernels", "--out", str(out),
                               "--kernels", word], capture_output=True, text=True)
        assert proc.returncode == 2 and said in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
        assert not out.exists()


def test_kernels_md_names_the_variants_in_force(tmp_path, monkeypatch):
    """kernels.md's provenance says the kernel variants it was measured with (as step.md does)."""
    from falcon_lab.bench.kernels import write
    from falcon_lab.kernels import variants

    prov = dict(dtype="bf16", gpu="none", commit="c", date="d", command="lab bench kernels", torch="t", triton="t",
                fla="none")
    with variants.using(variants.parse(["launch=f2_grad:num_warps=8"])):
        write([], prov, tmp_path)
    assert "- kernels: conv=" in (tmp_path / "kernels.md").read_text()
    assert "launch=f2_grad:num_warps=8" in (tmp_path / "kernels.md").read_text()


def test_an_op_that_would_refuse_a_mode_is_not_run_in_that_mode() -> None:
    """fla's gated backward on Hopper with Triton 3.4-3.7.0: the row says why, and nothing is called."""
    from falcon_lab.bench.kernels import _row
    from falcon_lab.bench.ops import Op

    def never(*_):
        raise AssertionError("called")

    op = Op("gated", "delta", lambda: None, never, never, anchor=True,
            refuses=lambda mode: "refused: not this mode" if mode == "fwd+bwd" else None)
    row = _row(op, (1, 64, 1, 16), torch.float32, "fwd+bwd", rep=1)
    assert row == {"shape": "1x64x1x16", "op": "gated", "mode": "fwd+bwd", "status": "refused: not this mode"}


def test_each_rule_is_set_beside_its_own_chunk_form() -> None:
    from falcon_lab.bench.ops import rule_chunk_ops, rule_ops

    rules = ("falcon-1", "falcon-2", "falcon-1a", "falcon-2a", "falcon-3a")
    triton_rows = [o.name for o in rule_ops(rules)]
    other_solves = ("falcon-2 outputs apart", "falcon-2 substitution")
    assert set(other_solves) <= set(triton_rows)  # falcon-2's other solves
    own_forms = [o.name for o in rule_chunk_ops(rules)]
    assert [n + " PyTorch chunk" for n in triton_rows if n not in other_solves] == own_forms
    rows = [{"shape": "s", "mode": "fwd", "op": "falcon-2", "ms": 2.0},
            {"shape": "s", "mode": "fwd", "op": "falcon-2 PyTorch chunk", "ms": 50.0},
            {"shape": "s", "mode": "fwd+bwd", "op": "falcon-2", "ms": 2.0},
            {"shape": "s", "mode": "fwd", "op": "falcon-2 substitution", "ms": 4.0}]
    _ratios(rows)
    assert rows[0]["x_own_chunk"] == pytest.approx(0.04)
    assert rows[1]["x_own_chunk"] is None and rows[2]["x_own_chunk"] is None
    assert rows[3]["x_own_chunk"] == pytest.approx(0.08)


def test_the_chunk_forms_run_at_t_4096_with_chunk_forms_and_the_anchor_only_at_the_first_shape() -> None:
    from falcon_lab.bench.kernels import _skipped
    from falcon_lab.bench.ops import rule_chunk_ops, torch_chunk_op

    own = {o.name: o for o in rule_chunk_ops(("falcon-1", "falcon-1a"))}
    for name in ("falcon-1a PyTorch chunk", "falcon-1 λ=0 PyTorch chunk"):
        assert _skipped(own[name], (4, 4096, 16, 128)) is None
        assert _skipped(own[name], (1, 16384, 16, 128)) is None  # the same B·T·H
        assert "B·T·H" in _skipped(own[name], (8, 4096, 16, 128))
    anchor = torch_chunk_op()
    assert _skipped(anchor, (8, 2048, 12, 64)) is None
    assert "smaller shapes" in _skipped(anchor, (4, 4096, 16, 128))


def test_rules_are_timed_at_every_shape_before_the_anchors(tmp_path, monkeypatch) -> None:
    """fla autotunes for tens of seconds an op: a run cut short keeps every rule's rows. The files still list
    the rows shape by shape, each shape's ops in their order."""
    import falcon_lab.bench.kernels as bench

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bench, "_provenance", lambda command, dtype: {
        "gpu": "none", "commit": "x", "date": "d", "command": command, "dtype": dtype, "torch": "t", "triton": "t",
        "fla": "f"})
    monkeypatch.setattr(bench, "_row", lambda op, shape, dtype, mode, rep: {
        "shape": "x".join(map(str, shape)), "op": op.name, "mode": mode, "ms": 1.0, "status": "ok"})
    said: list[str] = []
    shapes = [(1, 64, 2, 16), (1, 128, 2, 16)]
    rows = bench.run(shapes, ("falcon-1a",), "bf16", tmp_path, command="test", echo=said.append)
    timed = [line[15:43].strip() for line in said]  # the op's name, as `run` echoes each row
    assert timed[:4] == ["falcon-1a"] * 4 and all(name != "falcon-1a" for name in timed[4:])
    assert [r["shape"] for r in rows] == sorted((r["shape"] for r in rows), key=["1x64x2x16", "1x128x2x16"].index)
    assert rows[0]["op"] == "falcon-1a" and rows[1]["op"] == "falcon-1a"
    assert (tmp_path / "kernels.md").read_text().count("| 1x64x2x16 |") == len(rows) // 2


def test_chunk_forms_keep_every_rule_row():
    """--chunk-forms: every Triton row stays, each followed by its own PyTorch chunk form (falcon-2's solve forms
    share falcon-2's), the gated delta rule's included."""
    from falcon_lab.bench.kernels import paired_with_chunk_forms
    from falcon_lab.bench.ops import rule_chunk_ops, rule_ops

    rules = ("falcon-1", "falcon-2", "falcon-3", "falcon-1a", "falcon-2a", "falcon-3a")
    ops, chunk = rule_ops(rules), rule_chunk_ops(rules)
    names = [op.name for op in paired_with_chunk_forms(ops, chunk)]
    assert [n for n in names if not n.endswith(" PyTorch chunk")] == [op.name for op in ops]
    assert sorted(n for n in names if n.endswith(" PyTorch chunk")) == sorted(op.name for op in chunk)
    for i, name in enumerate(names):
        if name.endswith(" PyTorch chunk"):
            assert names[i - 1] == name.removesuffix(" PyTorch chunk")
    assert "gated delta rule" in names and names[-1] == "falcon-3a PyTorch chunk"
