"""Durable, all-or-nothing file writes: a reader sees the old file, the new one, or none.

`atomic_write` writes into a temporary file in the target's directory, flushes and fsyncs it,
renames it over the target and fsyncs the directory, so the new name survives a crash too.
The temporary file is removed when writing fails. The on-disk caches (anchor matrices,
teacher embeddings and signals, dev metrics) and every file of a model bundle go through it.
`atomic_directory` does the same for a folder of files (an exported encoder variant).
"""

import json
import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np


def fsync_file(path: Path) -> None:
    """Flush a file already written (e.g. by shutil.copytree) to the disk."""
    with Path(path).open("rb") as handle:
        os.fsync(handle.fileno())


def fsync_directory(path: Path) -> None:
    """Make the entries of a directory (new names, renames) durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(path: Path, write: Callable[[BinaryIO], None]) -> None:
    """Replace `path` with what `write` writes into the binary handle it is given.

    Creates the parent directory if needed. On any failure, including KeyboardInterrupt,
    `path` is left as it was and no temporary file remains.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name[:200]}.{uuid.uuid4().hex[:12]}.tmp")
    # Mode 0o666 less the umask, as open() gives: the worker writes files that replicas,
    # possibly another user, read (tempfile.mkstemp would make them 0o600).
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "wb") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    fsync_directory(path.parent)


def atomic_write_bytes(path: Path, data: bytes) -> None:
    atomic_write(path, lambda handle: handle.write(data))


def atomic_write_text(path: Path, text: str) -> None:
    """`text` as UTF-8, whatever the locale."""
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_json(path: Path, value: Any, *, indent: int | None = None) -> None:
    """`value` as UTF-8 JSON, non-ASCII characters kept as they are."""
    atomic_write_text(path, json.dumps(value, indent=indent, ensure_ascii=False))


def save_npy(path: Path, array: np.ndarray) -> None:
    """`np.save` of `array`, atomically; load it with `np.load(path, allow_pickle=False)`."""
    atomic_write(path, lambda handle: np.save(handle, array, allow_pickle=False))


@contextmanager
def atomic_directory(path: Path) -> Iterator[Path]:
    """Fill the temporary directory this yields; on success it is renamed to `path` whole.

    A reader sees the complete directory or none. When another process finished the same
    directory first, its copy is kept and ours is dropped: both were built from the same
    inputs. On failure nothing remains.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name[:200]}.{uuid.uuid4().hex[:12]}.tmp")
    tmp.mkdir()
    try:
        yield tmp
        for directory, _, names in os.walk(tmp):
            for name in names:
                fsync_file(Path(directory) / name)
            fsync_directory(Path(directory))
        try:
            os.rename(tmp, path)
        except OSError:
            if not path.is_dir():
                raise
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    fsync_directory(path.parent)
