"""Atomic writes: the old content or the new, never a half file, never a leftover temporary."""

import json
import os
import stat
from pathlib import Path
from typing import BinaryIO

import numpy as np
import pytest

from models.atomic import (
    atomic_write,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    save_npy,
)


def test_writes_create_parents_and_replace_the_old_content(tmp_path: Path):
    path = tmp_path / "a" / "b" / "file.bin"
    atomic_write_bytes(path, b"first")
    atomic_write_bytes(path, b"second")
    assert path.read_bytes() == b"second"
    atomic_write_text(path, "café")
    assert path.read_bytes() == "café".encode()
    atomic_write_json(path, {"name": "café", "n": [1, 2]}, indent=2)
    assert json.loads(path.read_text(encoding="utf-8")) == {"name": "café", "n": [1, 2]}
    assert os.listdir(path.parent) == ["file.bin"]


def test_save_npy_round_trips_without_pickle(tmp_path: Path):
    matrix = np.arange(6, dtype=np.float32).reshape(2, 3)
    save_npy(tmp_path / "m.npy", matrix)
    loaded = np.load(tmp_path / "m.npy", allow_pickle=False)
    assert loaded.dtype == np.float32 and np.array_equal(loaded, matrix)


def test_a_failing_write_keeps_the_old_file_and_leaves_no_temporary(tmp_path: Path):
    path = tmp_path / "file.txt"
    atomic_write_text(path, "old")

    def half_then_fail(handle: BinaryIO) -> None:
        handle.write(b"half of the new")
        raise KeyboardInterrupt  # even an interrupt, not only an Exception

    with pytest.raises(KeyboardInterrupt):
        atomic_write(path, half_then_fail)
    assert path.read_text() == "old"
    assert os.listdir(tmp_path) == ["file.txt"]


def test_new_files_get_the_umask_mode_like_open(tmp_path: Path):
    """Not mkstemp's 0o600: replicas running as another user read what the worker wrote."""
    previous = os.umask(0o022)
    try:
        atomic_write_bytes(tmp_path / "shared.bin", b"x")
    finally:
        os.umask(previous)
    assert stat.S_IMODE((tmp_path / "shared.bin").stat().st_mode) == 0o644
