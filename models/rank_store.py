"""Precomputed, quantised rank vectors of documents (models/rank_codes.py), memory-mapped.

With them, the document side of Eq. 7 is a dot product with stored codes instead of a matmul
and a sort per candidate (bench.search measures both). The store belongs to one anchor
matrix: its key names the encoder, the anchor texts, M and the code width, and a search under
any other anchors ignores it. It holds at most `budget_bytes` of codes; documents past that
have no row and are rescored exactly, as are documents not yet backfilled.

The rows live in a shared memory map of an unnamed temporary file under `directory` (O_TMPFILE:
no path, gone when the process exits, even by SIGKILL, so stale stores never pile up and
several processes never share one): the kernel may write cold rows back to disk and drop
them from memory, which anonymous memory could not do. It is rebuilt at every start, since a
row is only valid for the document text it was computed from.

Not thread-safe: SearchIndex calls it under its own lock. `encode_embeddings` reads nothing
mutable and runs outside that lock.
"""

import contextlib
import logging
import mmap
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

import numpy as np
import torch

from models.rank_codes import RankBits, RankCodec
from models.ranking import anchor_ranks

logger = logging.getLogger(__name__)

_FIRST_ROWS = 1024  # the file starts small and doubles, up to the budget
# madvise(MADV_POPULATE_READ), Linux 5.14+; Python 3.11's mmap module has no name for it.
_MADV_POPULATE_READ = 22


class RankStore:
    def __init__(
        self,
        anchors: torch.Tensor,
        key: str,
        bits: RankBits,
        directory: Path,
        budget_bytes: int,
    ) -> None:
        self.anchors = anchors  # (m, dim) unit rows, on the device that ranks them
        self.codec = RankCodec(int(anchors.shape[0]), bits)
        self.anchors_key = key  # AnchorSet.key of the anchors it was built for
        self.key = f"{key}-{bits}bit"
        self.capacity = budget_bytes // self.codec.row_bytes
        directory.mkdir(parents=True, exist_ok=True)
        # Open for the store's lifetime, closed by close(): no `with` block can span that.
        self._file: BinaryIO = tempfile.TemporaryFile(dir=directory, prefix="ranks-")  # noqa: SIM115
        self._matrix = self._map(0)
        self._rows: dict[int, int] = {}  # document id -> row
        self._free: list[int] = []  # rows of removed documents, reused first
        self._used = 0  # rows ever handed out (the high-water mark)
        self._warned_full = False

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, doc_id: int) -> bool:
        return doc_id in self._rows

    @property
    def bytes_mapped(self) -> int:
        return int(self._matrix.size)

    def encode_embeddings(self, embeddings: np.ndarray | torch.Tensor) -> np.ndarray:
        """(n, row_bytes) codes of unit embeddings (n, dim): exact ranks, then quantised."""
        vectors = torch.as_tensor(embeddings, dtype=torch.float32).to(self.anchors.device)
        if len(vectors) == 0:
            return np.empty((0, self.codec.row_bytes), dtype=np.uint8)
        ranks = anchor_ranks(vectors, self.anchors).cpu().numpy()  # (n, m)
        return self.codec.encode(ranks)

    def put(self, ids: Sequence[int] | np.ndarray, codes: np.ndarray) -> int:
        """Store (or replace) the codes of these documents; returns how many fit the budget."""
        stored = 0
        for doc_id, row_codes in zip(np.asarray(ids).tolist(), codes, strict=True):
            row = self._rows.get(doc_id)
            if row is None:
                row = self._take_row()
                if row is None:
                    self._warn_full()
                    continue
                self._rows[doc_id] = row
            self._matrix[row] = row_codes
            stored += 1
        return stored

    def remove(self, ids: Sequence[int] | np.ndarray) -> None:
        for doc_id in np.asarray(ids).tolist():
            row = self._rows.pop(doc_id, None)
            if row is not None:
                self._free.append(row)

    def similarities(
        self, ids: np.ndarray, query_rank: torch.Tensor
    ) -> tuple[np.ndarray, np.ndarray]:
        """(found (n,) bool, z_q . z_d (n,) float32, 0 where not found) of documents `ids` (n,)
        from their codes, against an exact query rank vector (m,). The codes are read where
        they lie in the map: copying 100 candidates' rows out first (1 MB at M = 10k) and
        dotting the copy made approximate searches at N = 1M IVF 1.42-1.45x cosine-only,
        against 1.29-1.37x without the copy (docs/search.md)."""
        rows = np.array([self._rows.get(i, -1) for i in ids.tolist()], dtype=np.int64)  # (n,)
        found = rows >= 0
        rho = np.zeros(len(rows), dtype=np.float32)  # (n,)
        rho[found] = self.codec.similarity_rows(self._matrix, rows[found], query_rank).numpy()
        return found, rho

    def close(self) -> None:
        del self._matrix
        self._file.close()

    def _take_row(self) -> int | None:
        if self._free:
            return self._free.pop()
        if self._used >= self.capacity:
            return None
        if self._used >= len(self._matrix):
            rows = min(self.capacity, max(_FIRST_ROWS, 2 * len(self._matrix)))
            try:
                self._matrix = self._map(rows)
            except OSError as error:  # the disk is full: keep the rows mapped so far
                logger.warning("rank store: cannot grow to %d rows (%s)", rows, error)
                self.capacity = self._used
                return None
        self._used += 1
        return self._used - 1

    def _map(self, rows: int) -> np.ndarray:
        """The file grown to `rows` rows and mapped anew; rows already written stay."""
        size = rows * self.codec.row_bytes
        if size == 0:
            return np.zeros((0, self.codec.row_bytes), dtype=np.uint8)
        # Blocks allocated now: a full disk is an OSError here, not a SIGBUS on a later write
        # into a hole of a sparse file.
        os.posix_fallocate(self._file.fileno(), 0, size)
        mapped = mmap.mmap(self._file.fileno(), size)
        _populate(mapped, self._used * self.codec.row_bytes)
        return np.ndarray((rows, self.codec.row_bytes), dtype=np.uint8, buffer=mapped)

    def _warn_full(self) -> None:
        if not self._warned_full:
            self._warned_full = True
            logger.warning(
                "rank store full at %d documents (RANKSERVE_PRECOMPUTED_RANKS_BUDGET_MB); "
                "the rest are rescored exactly",
                self.capacity,
            )


def _populate(mapped: mmap.mmap, length: int) -> None:
    """Map the first `length` bytes' pages now, at a grow, rather than in searches.

    A new mapping starts with no page mapped, so each row written before a grow would cost a
    page fault the first time a search reads it: at N = 300k (a script, AMD EPYC Zen 4, load
    1) gathering 100 rows took 0.80 ms p50 and 31 page faults, and 0.49 ms and none with this.
    Without the kernel's support (before Linux 5.14, or elsewhere) the faults stay in searches.
    """
    if length == 0 or sys.platform != "linux":
        return
    with contextlib.suppress(OSError):
        mapped.madvise(_MADV_POPULATE_READ, 0, length)
