"""Real English text offline: the documentation that Debian's doc packages ship as reStructuredText.

FineWeb-Edu cannot be fetched everywhere; these corpora install with an ordinary package client and are
read from disk, never downloaded while tokenising. Each corpus is a folder of `*.rst.txt` files (Sphinx's
copies of the sources, under the built HTML's `_sources/`), found under a root: `/` for an installed
package, or the folder a `.deb` was unpacked into (`apt-get download PKG && dpkg-deb -x PKG_*.deb DIR`,
no root needed). A document is one file, read as UTF-8.

The stream order is fixed and independent of the root and the file system: documents sorted by the
sha256 of `<corpus>/<path inside the corpus folder>`, so the val shard (the stream's first tokens) is a
deterministic, topic-mixed sample rather than the alphabetically first chapters.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from falcon_lab.tasks.fineweb.build import Block, write_stream

PREFIX = "docs"


@dataclass(frozen=True)
class Corpus:
    """Where a Debian doc package keeps its reStructuredText, relative to the root, and what it is."""

    package: str  # the Debian package, as Debian 12 names it (other releases change the version in the name)
    folder: str  # glob of the corpus folder under the root; the newest match is taken
    exclude: tuple[str, ...]  # folder names inside it left out (non-English translations)
    licence: str
    about: str


CORPORA: dict[str, Corpus] = {
    "python-docs": Corpus(
        "python3.11-doc", "usr/share/doc/python3.*/html/_sources", (), "PSF-2.0 (Python Software Foundation License)",
        "the Python documentation: tutorial, library and language reference, HOWTOs, FAQs"),
    "linux-docs": Corpus(
        "linux-doc-6.1", "usr/share/doc/linux-doc-*/html/_sources", ("translations",), "GPL-2.0",
        "the Linux kernel's documentation (English; its translations left out)"),
}


@dataclass(frozen=True)
class Document:
    """One file of a corpus: its corpus, its path inside the corpus folder, and where it lies."""

    corpus: str
    name: str
    path: Path

    @property
    def key(self) -> str:
        """The sort key of the stream: sha256 of `<corpus>/<name>`."""
        return hashlib.sha256(f"{self.corpus}/{self.name}".encode()).hexdigest()


def _version_key(path: Path) -> list[int | str]:
    return [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", str(path))]


def where_to_get(name: str) -> str:
    """How to install corpus `name` with or without root."""
    package = CORPORA[name].package
    return (f"install it (apt-get install {package}, or the release's version of it), or without root unpack it: "
            f"apt-get download {package} && dpkg-deb -x {package}_*.deb DIR, then --root DIR")


def find_corpus(name: str, root: str | os.PathLike[str] = "/") -> Path:
    """The folder of corpus `name` under `root` (the newest version where several are installed);
    ValueError naming the accepted corpora, or saying how to install the one missing."""
    if name not in CORPORA:
        raise ValueError(f"--corpus {name!r} is not accepted; accepted: {', '.join(CORPORA)}")
    # python3.X-dev's and -venv's doc folders link to python3.X's: one folder, under its own name.
    found = sorted({p.resolve() for p in Path(root).glob(CORPORA[name].folder) if p.is_dir()}, key=_version_key)
    if not found:
        raise ValueError(f"corpus {name} is not under {root} (looked for {CORPORA[name].folder}); {where_to_get(name)}")
    return found[-1]


def corpus_documents(name: str, folder: Path) -> list[Document]:
    """The `*.rst.txt` files of corpus `name` in `folder`, minus its excluded sub-folders, in path order."""
    skip = set(CORPORA[name].exclude)
    docs = [Document(name, p.relative_to(folder).as_posix(), p) for p in sorted(folder.rglob("*.rst.txt"))
            if p.is_file() and not skip.intersection(p.relative_to(folder).parts[:-1])]
    if not docs:
        raise ValueError(f"corpus {name}: {folder} holds no *.rst.txt files")
    return docs


def debian_version(folder: Path) -> str | None:
    """The Debian version of the package that installed `folder` (…/usr/share/doc/<dir>/html/_sources), from
    the first line of its changelog.Debian.gz, or None where the package left none."""
    doc_dir = folder.parent.parent
    for candidate in (doc_dir.parent / f"{doc_dir.name}-doc", doc_dir):
        changelog = candidate / "changelog.Debian.gz"
        if changelog.is_file():
            with gzip.open(changelog, "rt", encoding="utf-8", errors="replace") as f:
                match = re.match(r"(\S+) \(([^)]+)\)", f.readline())
            if match:
                return f"{match.group(1)} {match.group(2)}"
    return None


def read_document(doc: Document) -> str:
    """The text of `doc`; ValueError naming the file when it is not UTF-8."""
    try:
        return doc.path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"corpus {doc.corpus}: {doc.path} is not UTF-8 (byte {err.start})") from None


def stream_documents(
    names: Sequence[str], root: str | os.PathLike[str] = "/"
) -> tuple[list[Document], list[dict[str, Any]]]:
    """The documents of corpora `names` under `root` in stream order, and a description of each corpus
    (folder, package version, files, bytes, licence) for the manifest."""
    if not names:
        raise ValueError(f"--corpus needs at least one name; accepted: {', '.join(CORPORA)}")
    if len(set(names)) != len(names):
        raise ValueError(f"--corpus names a corpus twice: {', '.join(names)}")
    docs: list[Document] = []
    described = []
    for name in names:
        folder = find_corpus(name, root)
        found = corpus_documents(name, folder)
        docs += found
        described.append({"corpus": name, "folder": str(folder.resolve()), "package": debian_version(folder),
                          "files": len(found), "bytes": sum(d.path.stat().st_size for d in found),
                          "licence": CORPORA[name].licence})
    return sorted(docs, key=lambda d: d.key), described


def document_blocks(docs: Sequence[Document]) -> Callable[[tuple[int, int]], Iterator[Block]]:
    """The stream of `docs` for the shard writer: file f is document f, one row long."""

    def blocks(start: tuple[int, int]) -> Iterator[Block]:
        first, row = start
        for f in range(first + (row > 0), len(docs)):
            yield f, 0, [read_document(docs[f])]

    return blocks


def build_doc_shards(
    names: Sequence[str],
    tokenizer: str | os.PathLike[str],
    out: str | os.PathLike[str],
    root: str | os.PathLike[str] = "/",
    shard_tokens: int = 100_000_000,
    val_tokens: int = 200_000,
    log: Callable[[str], None] = lambda _: None,
) -> dict[str, Any]:
    """Tokenise corpora `names` (found under `root`) into `docs_{val,train}_*.bin` shards in `out`, as
    `lab data fineweb` does parquet: the same layout, manifest and resumption; returns the manifest."""
    docs, described = stream_documents(names, root)
    return write_stream(document_blocks(docs), len(docs), {"sources": described, "order": "sha256(corpus/name)"},
                        tokenizer, out, PREFIX, shard_tokens, val_tokens, log)
