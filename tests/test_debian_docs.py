"""`lab data debian-docs`: Debian's English documentation -> the same llm.c shards as FineWeb-Edu's parquet."""

from __future__ import annotations

import gzip
import os
from pathlib import Path

import numpy as np
import pytest

from falcon_lab.tasks.fineweb import encode_documents, find_shards, load_tokenizer, read_manifest, read_shard
from falcon_lab.tasks.fineweb.debian_docs import build_doc_shards, find_corpus, stream_documents
from tests.fineweb_util import documents, write_rank_file


@pytest.fixture
def ranks(tmp_path):
    return write_rank_file(tmp_path / "tiny.tiktoken")


def fake_root(root: Path, python: str = "3.11", texts: list[str] | None = None) -> Path:
    """A tree laid out as python3.X-doc and linux-doc-6.1 install it, with short documents."""
    texts = texts if texts is not None else documents(30)
    sources = root / f"usr/share/doc/python{python}/html/_sources"
    for i, text in enumerate(texts[:20]):
        path = sources / ("library" if i % 2 else "tutorial") / f"page{i}.rst.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    (sources / "library" / "page1.html").write_text("<p>not a source</p>")
    package = root / f"usr/share/doc/python{python}-doc"
    package.mkdir(parents=True, exist_ok=True)
    with gzip.open(package / "changelog.Debian.gz", "wt") as f:
        f.write(f"python{python} ({python}.2-6+deb12u9) bookworm-security; urgency=medium\n\n  * a change\n")
    linux = root / "usr/share/doc/linux-doc-6.1/html/_sources"
    for i, text in enumerate(texts[20:]):
        (linux / "admin-guide").mkdir(parents=True, exist_ok=True)
        (linux / "admin-guide" / f"g{i}.rst.txt").write_text(text, encoding="utf-8")
    (linux / "translations" / "zh_CN").mkdir(parents=True, exist_ok=True)
    (linux / "translations" / "zh_CN" / "index.rst.txt").write_text("中文文档", encoding="utf-8")
    return root


def test_docs_become_shards_that_read_back_in_hash_order(tmp_path, ranks):
    enc = load_tokenizer(ranks)
    root = fake_root(tmp_path / "root")
    manifest = build_doc_shards(["python-docs", "linux-docs"], ranks, tmp_path / "out", root, shard_tokens=120,
                                val_tokens=90)
    docs, described = stream_documents(["python-docs", "linux-docs"], root)
    assert len(docs) == 30 and not any("translations" in d.name for d in docs)
    assert [d.key for d in docs] == sorted(d.key for d in docs)
    expected = encode_documents(enc, [d.path.read_text(encoding="utf-8") for d in docs])
    val, train = find_shards(tmp_path / "out", "val"), find_shards(tmp_path / "out", "train")
    assert val[0].name == "docs_val_000000.bin" and train[0].name == "docs_train_000001.bin"
    assert len(read_shard(val[0])) == 90 and all(len(read_shard(p)) == 120 for p in train[:-1])
    got = np.concatenate([read_shard(p, enc.n_vocab) for p in val + train])
    np.testing.assert_array_equal(got, expected)
    on_disk = read_manifest(tmp_path / "out")
    assert on_disk["complete"] and on_disk["documents"] == 30 and on_disk["prefix"] == "docs"
    python, linux = on_disk["settings"]["sources"]
    assert python["package"] == "python3.11 3.11.2-6+deb12u9" and python["files"] == 20
    assert linux["package"] is None and linux["files"] == 10 and linux["licence"] == "GPL-2.0"
    assert manifest["train_tokens"] == len(expected) - 90


def test_the_split_does_not_depend_on_the_root_and_a_rerun_keeps_the_shards(tmp_path, ranks):
    a = build_doc_shards(["python-docs"], ranks, tmp_path / "a", fake_root(tmp_path / "r1"), 100, 50)
    b = build_doc_shards(["python-docs"], ranks, tmp_path / "b", fake_root(tmp_path / "r2"), 100, 50)
    for shard in a["shards"]:
        assert (tmp_path / "a" / shard["name"]).read_bytes() == (tmp_path / "b" / shard["name"]).read_bytes()
    assert [s["name"] for s in a["shards"]] == [s["name"] for s in b["shards"]]
    lines = []
    again = build_doc_shards(["python-docs"], ranks, tmp_path / "a", tmp_path / "r1", 100, 50, log=lines.append)
    assert again["n_shards"] == a["n_shards"] and "already written" in lines[0]
    with pytest.raises(ValueError, match="val_tokens differ"):
        build_doc_shards(["python-docs"], ranks, tmp_path / "a", tmp_path / "r1", 100, 60)


def test_an_interrupted_build_resumes_to_the_same_shards(tmp_path, ranks):
    root = fake_root(tmp_path / "root")
    whole = build_doc_shards(["python-docs", "linux-docs"], ranks, tmp_path / "whole", root, 37, 20)
    calls = []

    def stop_after_four(line):
        calls.append(line)
        if len(calls) == 4:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        build_doc_shards(["python-docs", "linux-docs"], ranks, tmp_path / "cut", root, 37, 20, log=stop_after_four)
    resumed = build_doc_shards(["python-docs", "linux-docs"], ranks, tmp_path / "cut", root, 37, 20)
    assert resumed["n_shards"] == whole["n_shards"] and resumed["documents"] == whole["documents"]
    for shard in whole["shards"]:
        assert (tmp_path / "cut" / shard["name"]).read_bytes() == (tmp_path / "whole" / shard["name"]).read_bytes()


def test_the_newest_python_is_taken_and_missing_corpora_say_how_to_install(tmp_path):
    root = fake_root(tmp_path / "root", python="3.9")
    fake_root(root, python="3.11")
    venv = root / "usr/share/doc/python3.11-venv"
    venv.mkdir()
    (venv / "html").symlink_to("../python3.11/html")
    assert find_corpus("python-docs", root).parts[-3] == "python3.11"
    with pytest.raises(ValueError, match="apt-get download python3.11-doc"):
        find_corpus("python-docs", tmp_path / "empty")
    with pytest.raises(ValueError, match="accepted: python-docs, linux-docs"):
        find_corpus("wikipedia", root)


def test_lab_data_debian_docs_cli(tmp_path, ranks):
    from typer.testing import CliRunner

    from falcon_lab.cli import app

    root = fake_root(tmp_path / "root")
    bad = root / "usr/share/doc/python3.11/html/_sources/tutorial/latin1.rst.txt"
    args = ["data", "debian-docs", "--tokenizer", str(ranks), "--root", str(root), "--out", str(tmp_path / "out"),
            "--val-tokens", "60"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "docs_val_000000.bin" in result.output and "python-docs (python3.11 3.11.2-6+deb12u9" in result.output
    bad.write_bytes("caf\xe9".encode("latin-1"))
    refused = CliRunner().invoke(app, [*args[:-4], "--out", str(tmp_path / "out2")])
    assert refused.exit_code == 2 and "latin1.rst.txt is not UTF-8" in refused.output
    unknown = CliRunner().invoke(app, [*args, "--corpus", "perl-docs"])
    assert unknown.exit_code == 2 and "accepted: python-docs, linux-docs" in unknown.output


def installed_root() -> Path | None:
    """Where python3.X-doc is installed or unpacked: LAB_DEBIAN_DOCS_ROOT, else / when the package is there."""
    root = os.environ.get("LAB_DEBIAN_DOCS_ROOT")
    if root:
        return Path(root)
    return Path("/") if any(Path("/").glob("usr/share/doc/python3.*/html/_sources")) else None


@pytest.mark.skipif(installed_root() is None, reason="python3.X-doc is neither installed nor unpacked into "
                    "LAB_DEBIAN_DOCS_ROOT (apt-get download python3.11-doc && dpkg-deb -x python3.11-doc_*.deb DIR)")
def test_the_installed_python_docs_tokenise(tmp_path, ranks):
    """A slice of the real package: its tutorial's files, through the tiny rank file."""
    root = installed_root()
    folder = find_corpus("python-docs", root)
    slice_root = tmp_path / "slice"
    target = slice_root / folder.relative_to(root)
    for path in sorted((folder / "tutorial").glob("*.rst.txt"))[:5]:
        (target / "tutorial").mkdir(parents=True, exist_ok=True)
        (target / "tutorial" / path.name).write_bytes(path.read_bytes())
    manifest = build_doc_shards(["python-docs"], ranks, tmp_path / "out", slice_root, val_tokens=1000)
    assert manifest["documents"] == 5 and manifest["train_tokens"] > 1000
    text = load_tokenizer(ranks).decode(read_shard(tmp_path / "out" / "docs_val_000000.bin").tolist())
    assert "Python" in text
