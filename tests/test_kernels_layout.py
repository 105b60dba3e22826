"""The layout of falcon_lab/kernels/: folders that import one way, one spec per rule, one set of fused chunk sizes."""

from __future__ import annotations

import ast
import re
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from falcon_lab.kernels import RULES, fast_weight_rule, rule_spec, rule_specs
from falcon_lab.kernels.common import grid
from falcon_lab.kernels.common.config import BACKENDS, CHUNK_SIZES, FUSED_RULES, RuleConfig
from falcon_lab.kernels.falcon import dispatch
from tests.rules_util import rule_inputs

KERNELS = Path(__file__).resolve().parents[1] / "falcon_lab" / "kernels"
BASELINES = ("delta", "linear_attention")
FAMILIES = ("regression", "inner_product", "window")


def folder_imports() -> dict[str, set[str]]:
    """For each folder of falcon_lab/kernels/, the other folders its modules import (``kernels.X`` -> folder X)."""
    graph: dict[str, set[str]] = {}
    for path in KERNELS.rglob("*.py"):
        rel = path.relative_to(KERNELS)
        folder = rel.parts[0] if len(rel.parts) > 1 else ""
        found = graph.setdefault(folder, set())
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            for name in names:
                parts = name.split(".")
                if parts[0] == "falcon_lab":
                    assert parts[1:2] == ["kernels"], f"falcon_lab/kernels/{rel} imports {name}"
                    parts = parts[1:]
                if parts[0] != "kernels":
                    continue
                elif len(parts) > 1 and parts[1] != folder and (KERNELS / parts[1]).is_dir():
                    found.add(parts[1])
    return graph


def test_folders_import_one_way() -> None:
    """common imports no folder; the baselines import common only; the families import common, the baselines
    and one another without a cycle; only the op's front (falcon) sees them all."""
    graph = folder_imports()
    assert graph["common"] == set()
    for baseline in BASELINES:
        assert graph[baseline] <= {"common"}, (baseline, graph[baseline])
    for family in FAMILIES:
        assert "falcon" not in graph[family], (family, graph[family])

    def reaches(start: str, goal: str, seen: frozenset = frozenset()) -> bool:
        return any(nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt}))
                   for nxt in graph.get(start, ()))

    cycles = [folder for folder in graph if folder and reaches(folder, folder)]
    assert not cycles, f"import cycles through {cycles}: {graph}"


def test_every_rule_spec_covers_every_backend() -> None:
    """Every registered rule has a function for every backend, held by its spec; the fused rules are the specs'
    with a triton form; the six rules are declared in one module, with their forms imported there."""
    assert tuple(RULES) == ("falcon-1", "falcon-2", "falcon-3", "falcon-1a", "falcon-2a", "falcon-3a")
    assert set(FUSED_RULES) == {spec.name for spec in rule_specs() if spec.triton is not None}
    for rule in RULES:
        for backend in BACKENDS:
            fn = dispatch.form(rule, backend)
            assert callable(fn) and fn is rule_spec(rule).form(backend)
    assert {spec.name for spec in rule_specs() if spec.recurrent.__module__.endswith(".naive")} == set(RULES)
    text = (KERNELS / "falcon" / "dispatch.py").read_text()
    assert "importlib" not in text and "import_module" not in text


def test_no_layer_decides_a_rule_trait_by_its_name() -> None:
    """The kernels and mixers ask the rule's spec: no ``rule ==`` / ``rule in`` branch outside the declarations."""
    pattern = re.compile(r"rule ?(==|!=|in |not in)")
    found = [f"{path.relative_to(KERNELS.parent)}:{n}" for folder in ("kernels", "mixers")
             for path in (KERNELS.parent / folder).rglob("*.py")
             for n, line in enumerate(path.read_text().splitlines(), 1)
             if pattern.search(line) and "for rule in" not in line]
    assert not found, found


def test_chunk_sizes_are_defined_once() -> None:
    defined = [str(path.relative_to(KERNELS)) for path in KERNELS.rglob("*.py")
               for node in ast.walk(ast.parse(path.read_text()))
               if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and "CHUNK_SIZES" in t.id
                                                       for t in node.targets)]
    assert defined == ["common/config.py"]


def test_the_fused_kernels_take_the_chunk_sizes_and_no_other() -> None:
    """CHUNK_SIZES is what backend="triton" takes for every fused rule and what auto picks it for; falcon-2/2a's
    blocks of 16 tokens fit whole in each, and the launch slicing counts the blocks of the longest."""
    assert CHUNK_SIZES == (16, 32, 64)
    assert all(c % 16 == 0 for c in CHUNK_SIZES) and grid.SLOTS_PER_CHUNK == max(CHUNK_SIZES) // 16
    accepted = ", ".join(map(str, CHUNK_SIZES))
    for rule in FUSED_RULES:
        x = {name: t.float() for name, t in rule_inputs(rule, T=3, Dk=16, Dv=16, seed=1).items()}
        for chunk in (8, 24, 48, 128):
            with pytest.raises(ValueError, match=f"chunk_size={chunk} for backend='triton'; accepted: {accepted}"):
                fast_weight_rule(**x, rule=rule, backend="triton", chunk_size=chunk)
        cuda = SimpleNamespace(is_cuda=True, dtype=torch.bfloat16, shape=(1, 8, 2, 64))
        picks = {chunk: dispatch.auto_backend(cuda, cuda, RuleConfig(rule=rule), chunk)
                 for chunk in (8, *CHUNK_SIZES, 128)}
        fused = "triton" if rule_spec(rule).auto else "chunk"
        assert picks == {8: "chunk", 16: fused, 32: fused, 64: fused, 128: "chunk"}, (rule, picks)


def test_packed_sequences_go_to_rows_in_groups_of_like_lengths() -> None:
    """Fresh packed sequences, outputs alone, laid one to a row in up to four groups sorted by length: every
    sequence once, each group no longer than the next."""
    from falcon_lab.kernels.falcon.api import _length_groups

    bounds = [0, 5, 21, 22, 40, 41, 90, 93, 100, 130]
    groups = _length_groups(bounds)
    assert sorted(n for g in groups for n in g) == list(range(len(bounds) - 1)) and len(groups) == 4
    lengths = [[bounds[n + 1] - bounds[n] for n in g] for g in groups]
    assert all(max(a) <= min(b) for a, b in zip(lengths, lengths[1:]))
    assert _length_groups([0, 3, 9]) == [[0], [1]]
