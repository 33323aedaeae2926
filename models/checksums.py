"""Content checksums that key every on-disk cache (anchors, corpus embeddings, bundles)."""

import hashlib
from collections.abc import Iterable
from pathlib import Path

_CHUNK = 1 << 20


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


def sha256_directory(root: Path) -> str:
    """One digest over every file's relative path and content, in sorted order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        digest.update(path.relative_to(root).as_posix().encode())
        digest.update(b"\0")
        digest.update(sha256_file(path).encode())
    return digest.hexdigest()


def sha256_texts(texts: Iterable[str]) -> str:
    """Digest of an ordered list of texts; the separator keeps ["ab"] and ["a", "b"] apart."""
    digest = hashlib.sha256()
    for text in texts:
        digest.update(text.encode("utf-8", "surrogatepass"))
        digest.update(b"\0")
    return digest.hexdigest()
