"""falcon-lab beside the field's own libraries: the Hugging Face `kernels` distribution (a transformers
dependency that installs a top-level `kernels`) and transformers itself live in the same environment as the lab,
whose modules are all under `falcon_lab`. Both are in the dev extra, so this runs in CI, not skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import torch
from torch import nn

import kernels as hf_kernels  # the Hugging Face distribution, not ours
import transformers
from falcon_lab.kernels import RULES
from falcon_lab.mixers import FalconAttention

ROOT = Path(__file__).resolve().parents[1]


def test_no_top_level_name_is_ours() -> None:
    """`kernels` is Hugging Face's and the lab's ops stay reachable in the same process."""
    found = Path(hf_kernels.__file__).resolve()
    assert "site-packages" in found.parts and not found.is_relative_to((ROOT / "falcon_lab").resolve()), found
    assert hasattr(hf_kernels, "get_kernel")
    assert "falcon-1a" in RULES
    from transformers.integrations import hub_kernels  # does `from kernels import ...` itself

    assert hub_kernels is not None


def test_lab_train_beside_transformers(tmp_path: Path) -> None:
    """`lab train` runs in an environment that holds transformers and Hugging Face's `kernels`."""
    env = {**os.environ, "LAB_RESULTS": str(tmp_path)}
    proc = subprocess.run([sys.executable, "-m", "falcon_lab", "train", "--preset", "addition-tiny", "--mixer",
                           "falcon-1a.3", "--max-steps", "3", "--no-progress"],
                          capture_output=True, text=True, env=env, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    (run,) = (tmp_path / "runs").iterdir()
    assert json.loads((run / "run.json").read_text())["status"] == "finished"
    # Checkpoints hold no module path of ours (only torch's and the standard library's), so a rename of the
    # package never stops an old checkpoint from loading.
    for ckpt in (run / "checkpoints").iterdir():
        found = _pickled_globals(ckpt)
        assert found and all(m.split(".")[0] in ("torch", "collections", "builtins", "_codecs", "numpy")
                             for m, _ in found), (ckpt.name, sorted(found))


def _pickled_globals(path: Path) -> set[tuple[str, str]]:
    """The (module, name) pairs a torch checkpoint's pickle asks for."""
    import pickle

    seen: set[tuple[str, str]] = set()

    class Recording(pickle.Unpickler):
        def find_class(self, module: str, name: str) -> object:
            seen.add((module, name))
            return super().find_class(module, name)

    class Module:
        Unpickler = Recording
        load = pickle.load

    torch.load(path, map_location="cpu", weights_only=False, pickle_module=Module)
    return seen


class _FalconForLlama(nn.Module):
    """A Falcon layer in the place of LlamaAttention: takes the decoder layer's keywords, returns (output, None)."""

    def __init__(self, hidden_size: int, num_heads: int, rule: str, variant: str) -> None:
        super().__init__()
        self.layer = FalconAttention(hidden_size=hidden_size, num_heads=num_heads, rule=rule, variant=variant)

    def forward(self, hidden_states: torch.Tensor, **_: object) -> tuple[torch.Tensor, None]:
        out, _cache = self.layer(hidden_states)
        return out, None


def _llama(rule: str, variant: str) -> nn.Module:
    config = transformers.LlamaConfig(vocab_size=32, hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=4, max_position_embeddings=64)
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config)
    for block in model.model.layers:
        block.self_attn = _FalconForLlama(64, 4, rule, variant)
    return model


def test_falcon_attention_inside_a_hugging_face_llama() -> None:
    """FalconAttention dropped into LlamaForCausalLM: backward reaches the Falcon weights, a few steps of
    training on a fixed sequence lower the loss, and no output sees a later token."""
    for rule, variant in (("falcon-1a", "3"), ("falcon-1", "3")):
        model = _llama(rule, variant)
        ids = torch.randint(0, 32, (4, 24), generator=torch.Generator().manual_seed(1))
        opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
        losses = []
        for _ in range(25):
            loss = model(input_ids=ids, labels=ids).loss
            opt.zero_grad()
            loss.backward()
            losses.append(loss.item())
            opt.step()
        grad = model.model.layers[0].self_attn.layer.mixer.q_proj.weight.grad
        assert grad is not None and grad.abs().sum() > 0
        assert losses[-1] < 0.5 * losses[0], (rule, losses[0], losses[-1])

        model.eval()
        with torch.no_grad():
            t = 10
            changed = ids.clone()
            changed[:, t] = (changed[:, t] + 1) % 32
            a, b = model(input_ids=ids).logits, model(input_ids=changed).logits
        torch.testing.assert_close(a[:, :t], b[:, :t], rtol=0, atol=1e-5)
        assert (a[:, t:] - b[:, t:]).abs().max() > 1e-4
