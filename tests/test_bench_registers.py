"""`lab bench registers`: every Triton launch of a rule's op intercepted on a CPU (nothing runs) and compiled for
sm_90 by the installed Triton, its registers and spills read back. The interpreter must be off for it (these tests
run the command in a process without TRITON_INTERPRET)."""

from __future__ import annotations

import csv
import os
import subprocess
import sys
from pathlib import Path

ENV = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}


def lab(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "falcon_lab", "bench", "registers", *args], capture_output=True,
                          text=True, env=ENV if env is None else env)


CAPTURE = """
import json, torch
from falcon_lab.bench import registers
calls = []
launches = registers.capture("falcon-1a", (2, 64, 2, 32), torch.bfloat16, sample_length=20)
first = launches[1]
values = dict(zip(first.fn.arg_names, first.args), **first.kwargs)
print(json.dumps(dict(names=[x.name for x in launches], keys=len({x.key() for x in launches}),
                      prec=values["PREC"], samples=values["SAMPLES"], h_nan=bool(values["h"].isnan().all()))))
"""


def test_the_launches_are_recorded_and_none_runs() -> None:
    """falcon-1a forward and backward by sample id: its kernels' launches in order, each once, with the constants
    the host code chose for a GPU (bf16 products, not the interpreter's), and no kernel wrote its output (the
    chunk states' buffer stays as allocated, NaN)."""
    import json

    code = "from falcon_lab.kernels.common import triton_helpers\n" \
           "triton_helpers.new_buffer = lambda *s, dtype, device: torch.full(s, float('nan'), dtype=dtype)\n"
    proc = subprocess.run([sys.executable, "-c", "import torch\n" + code + CAPTURE], capture_output=True, text=True,
                          env=ENV)
    assert proc.returncode == 0, proc.stderr
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["names"][:2] == ["_prep_kernel", "_fwd_h_kernel"] and "_bwd_dv_kernel" in got["names"]
    assert got["keys"] == len(got["names"])
    assert got["prec"] == "bf16" and got["samples"] is True and got["h_nan"] is True


def test_a_rule_compiles_for_sm90_and_its_tables_are_written(tmp_path: Path) -> None:
    proc = lab("--rule", "conv", "--shape", "2,64,2,32", "--sample-length", "20", "--out", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader((tmp_path / "registers.csv").open()))
    assert [r["kernel"] for r in rows] == ["_fwd_kernel", "_bwd_serial_kernel"]
    for r in rows:
        assert 0 < int(r["registers"]) <= 255 and int(r["spill_bytes"]) >= 0 and int(r["num_warps"]) >= 1
        ctas = int(r["ctas_per_sm"])
        assert 1 <= ctas <= 32 and int(r["warps_per_sm"]) == ctas * int(r["num_warps"])
    text = (tmp_path / "registers.md").read_text()
    assert "sm_90" in text and "rows of samples of 20 tokens" in text and "kernels: conv=" in text


def test_a_launch_variant_reaches_the_compiled_kernel(tmp_path: Path) -> None:
    """--kernels launch=... as the benches take it: falcon-2's f2_grad at 8 warps is compiled at 8 warps."""
    proc = lab("--rule", "falcon-2", "--shape", "1,32,1,16", "--kernels", "launch=f2_grad:num_warps=8", "--out",
               str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    rows = {r["kernel"]: r for r in csv.DictReader((tmp_path / "registers.csv").open())}
    assert rows["f2_grad_kernel"]["num_warps"] == "8" and rows["f2_fwd_kernel"]["num_warps"] == "4"


def test_occupancy_follows_cuda_rules_for_sm90() -> None:
    """CTAs an SM holds: registers allocated to a warp 256 at a time out of 64K, at most 64 warps and 32 CTAs, shared
    memory of 228 KiB with 1 KiB reserved a CTA (CUDA's occupancy calculator for compute capability 9.0)."""
    from falcon_lab.bench.registers import occupancy

    assert occupancy(255, 4, 1024) == 2  # 8,192 registers a warp: 8 warps
    assert occupancy(199, 4, 0) == 2  # 6,400 a warp: 10 warps, two CTAs of 4
    assert occupancy(32, 4, 0) == 16  # 64 warps
    assert occupancy(16, 1, 0) == 32  # the CTA limit
    assert occupancy(64, 4, 100 * 1024) == 2  # shared memory: two CTAs of 101 KiB


def test_bad_input_is_refused_in_one_line_and_nothing_written(tmp_path: Path) -> None:
    out = tmp_path / "out"
    for args, said, env in ((("--rule", "falcon-4"), "unknown rule 'falcon-4'", None),
                            (("--shape", "1,2,3"), "expected B,T,H,D", None),
                            (("--dtype", "fp8"), "--dtype must be", None),
                            (("--sample-length", "0"), "--sample-length must be >= 1", None),
                            (("--window", "0"), "window", None),
                            (("--kernels", "launch=f9:BK=1"), "unknown kernel", None),
                            (("--rule", "conv"), "TRITON_INTERPRET is set", dict(ENV, TRITON_INTERPRET="1"))):
        proc = lab(*args, "--out", str(out), env=env)
        assert proc.returncode == 2 and said in proc.stderr and proc.stderr.count("\n") == 1, proc.stderr
        assert not out.exists()
