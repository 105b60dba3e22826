"""Fetch GPT-2's BPE rank file once, from the PyPI source package that ships it (`lab data gpt2-ranks`).

The `openai-whisper` source distribution carries `whisper/assets/gpt2.tiktoken`, byte-identical to tiktoken's
r50k_base. This is the one place the lab reaches the network, and only when a user (or CI) asks: training and
tokenising read the local file (`falcon_lab.tasks.fineweb.tokenizer`). The archive is checked against the sha256 PyPI
publishes for it, the rank file against `GPT2_SHA256`.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tarfile
import urllib.request
from pathlib import Path

from falcon_lab.tasks.fineweb.tokenizer import GPT2_SHA256
from falcon_lab.tasks.files import atomic_write

PACKAGE, VERSION = "openai-whisper", "20250625"
MEMBER = "whisper/assets/gpt2.tiktoken"
SIMPLE_INDEX = "https://pypi.org/simple/{package}/"  # the JSON form of PyPI's simple API (PEP 691)


def _get(url: str, timeout: float, accept: str = "*/*") -> bytes:
    request = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(request, timeout=timeout) as response:  # noqa: S310 (https URLs of PyPI only)
        return response.read()


def fetch_gpt2_ranks(out: str | os.PathLike[str], timeout: float = 60.0, expected_sha256: str = GPT2_SHA256,
                     version: str = VERSION) -> Path:
    """Write GPT-2's rank file to `out` from PyPI's `openai-whisper` source package; a file already there with
    the right sha256 is kept. ValueError naming what does not match; OSError when PyPI cannot be reached."""
    out = Path(out)
    if out.is_file() and hashlib.sha256(out.read_bytes()).hexdigest() == expected_sha256:
        return out
    index = json.loads(_get(SIMPLE_INDEX.format(package=PACKAGE), timeout, "application/vnd.pypi.simple.v1+json"))
    wanted = {f"{name}-{version}.tar.gz" for name in (PACKAGE, PACKAGE.replace("-", "_"))}
    sdists = [f for f in index.get("files", []) if f.get("filename") in wanted]
    if not sdists:
        raise ValueError(f"PyPI lists no source package of {PACKAGE} {version}")
    archive = _get(sdists[0]["url"], timeout)
    if hashlib.sha256(archive).hexdigest() != sdists[0]["hashes"]["sha256"]:
        raise ValueError(f"{sdists[0]['filename']}: sha256 differs from the one PyPI publishes")
    with tarfile.open(fileobj=io.BytesIO(archive), mode="r:gz") as tar:
        names = [m for m in tar.getmembers() if m.isfile() and m.name.endswith("/" + MEMBER)]
        if not names:
            raise ValueError(f"{sdists[0]['filename']} holds no {MEMBER}")
        data = tar.extractfile(names[0]).read()  # type: ignore[union-attr]
    if hashlib.sha256(data).hexdigest() != expected_sha256:
        raise ValueError(f"{MEMBER} of {sdists[0]['filename']}: sha256 differs from GPT-2's rank file")
    atomic_write(out, lambda f: f.write(data))
    return out
