"""A CPU install: `pip install -e .` brings no triton (CUDA builds of torch bring their own), and the lab trains
without it; the dev extra keeps it for the kernel tests, interpreted on a CPU."""

import os
import subprocess
import sys
import textwrap
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

WITHOUT_TRITON = """
import importlib.abc, sys

class NoTriton(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "triton" or name.startswith("triton."):
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)
        return None

sys.meta_path.insert(0, NoTriton())
sys.argv = ["lab", *sys.argv[1:]]
from falcon_lab.cli import main
main()
"""


def test_the_install_requires_no_triton_and_the_dev_extra_has_it() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not [d for d in project["dependencies"] if d.startswith("triton")]
    assert [d for d in project["optional-dependencies"]["dev"] if d.startswith("triton")]
    assert [d for d in project["optional-dependencies"]["triton"] if d.startswith("triton")]


def test_the_lab_trains_every_mixer_family_without_triton(tmp_path: Path) -> None:
    script = tmp_path / "no_triton.py"
    script.write_text(textwrap.dedent(WITHOUT_TRITON))
    env = {**os.environ, "LAB_RESULTS": str(tmp_path)}
    for mixer in ("transformer", "falcon-1.3", "deltanet"):
        proc = subprocess.run([sys.executable, str(script), "train", "--preset", "tiny", "--mixer", mixer,
                               "--max-steps", "2", "--no-progress"], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=300)
        assert proc.returncode == 0 and "finished (2 steps)" in proc.stdout, proc.stderr[-3000:]
