"""Precomputed, quantised rank vectors of documents (models/rank_codes.py), held in memory.

With them, the document side of Eq. 7 is a dot product with stored codes instead of a matmul
and a sort per candidate (bench.search measures both). The store belongs to one anchor
matrix: its key names the encoder, the anchor texts, M and the code width, and a search under
any other anchors ignores it. It holds at most `budget_bytes` of codes; documents past that
have no row and are rescored exactly, as are documents not yet backfilled.

The rows live in anonymous memory, reserved up to the budget and touched only as rows are
written, in 2 MB pages where the kernel allows (MADV_HUGEPAGE): a search gathers 100 random
rows of up to 10 KB, which took 0.18-0.19 ms from 2 MB pages against 0.20-0.27 ms from 4 KB
ones (fewer TLB misses; a script, AMD EPYC Zen 4 VM). A disk file under the map, as
earlier versions had, was written back for nothing (the store is rebuilt at every start, since
a row is only valid for the document text it was computed from) and, on a 2-core VM, made
reading 100 rows of a 10 GB store take 1.1-3.4 ms instead of 0.2-0.45 (docs/benchmarks.md).
The budget is therefore memory. Where the host lets memory the guest has not read for a while
go cold, `keep_warm_s` reads one byte of every 2 MB page of the written rows that often
(models/page_warmer.py), so a search's first read of its rows does not find them cold.

Not thread-safe: SearchIndex calls it under its own lock. `encode_embeddings` reads nothing
mutable and runs outside that lock.
"""

import contextlib
import logging
import mmap
import os
import sys
import weakref
from collections.abc import Sequence

import numpy as np
import torch

from models.page_warmer import PageWarmer
from models.rank_codes import RankBits, RankCodec
from models.ranking import anchor_ranks
from models.row_map import RowMap

logger = logging.getLogger(__name__)

# The reservation is address space: memory is taken as rows are written, so it need not be
# committed at once. Python 3.11's mmap module has no name for MAP_NORESERVE (Linux's value).
_MAP_NORESERVE = getattr(mmap, "MAP_NORESERVE", 0x4000 if sys.platform == "linux" else 0)


class RankStore:
    def __init__(
        self,
        anchors: torch.Tensor,
        key: str,
        bits: RankBits,
        budget_bytes: int,
        keep_warm_s: float = 0.0,
    ) -> None:
        self.anchors = anchors  # (m, dim) unit rows, on the device that ranks them
        self.codec = RankCodec(int(anchors.shape[0]), bits)
        self.anchors_key = key  # AnchorSet.key of the anchors it was built for
        self.key = f"{key}-{bits}bit"
        self._matrix = _reserve(min(budget_bytes, _physical_memory()), self.codec.row_bytes)
        self.capacity = len(self._matrix)
        self._rows = RowMap()  # document id -> row
        self._free: list[int] = []  # rows of removed documents, reused first
        self._used = 0  # rows ever handed out (the high-water mark)
        self._warned_full = False
        self._warmer: PageWarmer | None = None
        if keep_warm_s > 0:
            # A weak reference: the thread must not keep a replaced store's memory alive.
            this = weakref.ref(self)
            self._warmer = PageWarmer(
                self.key, keep_warm_s, lambda: None if (store := this()) is None else store.written
            )

    def __len__(self) -> int:
        return len(self._rows)

    def __contains__(self, doc_id: int) -> bool:
        return doc_id in self._rows

    @property
    def bytes_used(self) -> int:
        """Memory its rows have taken (rows of removed documents are reused)."""
        return self._used * self.codec.row_bytes

    @property
    def written(self) -> np.ndarray:
        """The rows handed out so far (in use, or freed and ready for reuse)."""
        return self._matrix[: self._used]

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
                self._rows.set(doc_id, row)
            self._matrix[row] = row_codes
            stored += 1
        return stored

    def remove(self, ids: Sequence[int] | np.ndarray) -> None:
        for doc_id in np.asarray(ids).tolist():
            row = self._rows.pop(doc_id)
            if row is not None:
                self._free.append(row)

    def similarities(
        self, ids: np.ndarray, query_rank: torch.Tensor
    ) -> tuple[np.ndarray, np.ndarray]:
        """(found (n,) bool, z_q . z_d (n,) float32, 0 where not found) of documents `ids` (n,)
        from their codes, against an exact query rank vector (m,). The codes are read where
        they lie in the store: copying 100 candidates' rows out first (1 MB at M = 10k) and
        dotting the copy made approximate searches at N = 1M IVF 1.42-1.45x cosine-only,
        against 1.29-1.37x without the copy (docs/search.md)."""
        rows = self._rows.rows(ids)  # (n,)
        found = rows >= 0
        rho = np.zeros(len(rows), dtype=np.float32)  # (n,)
        rho[found] = self.codec.similarity_rows(self._matrix, rows[found], query_rank).numpy()
        return found, rho

    def close(self) -> None:
        """Give the memory back now rather than when the last reference goes."""
        if self._warmer is not None:
            self._warmer.stop()
        self._matrix = np.zeros((0, self.codec.row_bytes), dtype=np.uint8)

    def _take_row(self) -> int | None:
        if self._free:
            return self._free.pop()
        if self._used >= self.capacity:
            return None
        self._used += 1
        return self._used - 1

    def _warn_full(self) -> None:
        if not self._warned_full:
            self._warned_full = True
            logger.warning(
                "rank store full at %d documents (RANKSERVE_PRECOMPUTED_RANKS_BUDGET_MB); "
                "the rest are rescored exactly",
                self.capacity,
            )


def _physical_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def _reserve(budget_bytes: int, row_bytes: int) -> np.ndarray:
    """A (rows, row_bytes) matrix of zero bytes in fresh anonymous memory, as many rows as the
    budget holds. Where the kernel refuses that much address space (strict overcommit), half
    as much, and so on: the rows past it are then scored exactly, as past the budget."""
    rows = budget_bytes // row_bytes
    while rows > 0:
        try:
            mapped = mmap.mmap(
                -1, rows * row_bytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_NORESERVE
            )
        except OSError:
            logger.warning("rank store: cannot reserve %d rows, trying half", rows)
            rows //= 2
            continue
        with contextlib.suppress(AttributeError, OSError):  # THP off, or not Linux
            mapped.madvise(mmap.MADV_HUGEPAGE)
        return np.ndarray((rows, row_bytes), dtype=np.uint8, buffer=mapped)
    return np.zeros((0, row_bytes), dtype=np.uint8)
