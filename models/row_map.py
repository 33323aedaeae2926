"""Document id -> row of a RankStore, looked up for every search's candidates at once.

A search looks up 100 candidates in a map of up to millions of ids. From a dict that took
56 µs at 1M ids (33 at 100k), a cache miss or more per id that the interpreter takes one at a
time; from an array indexed by id, a few µs (a script, AMD EPYC Zen 5, load 0.8). The service
numbers documents from 1 upwards (core/documents.py), so ids are small and dense, and an array
of one int64 per id up to the largest is smaller than a dict of as many ids. An id past what such an
array would sensibly cover (negative, or more than _SLACK beyond four times the ids held)
goes to a dict instead, so arbitrary int64 ids still work.
"""

import numpy as np

_SLACK = 1 << 20  # ids below this always go to the array (8 MB)
_ABSENT = -1


class RowMap:
    def __init__(self) -> None:
        self._table = np.full(0, _ABSENT, dtype=np.int64)  # row of id i, or _ABSENT
        self._other: dict[int, int] = {}  # ids the table does not cover
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def get(self, doc_id: int) -> int | None:
        if 0 <= doc_id < len(self._table):
            row = int(self._table[doc_id])
            return None if row == _ABSENT else row
        return self._other.get(doc_id)

    def __contains__(self, doc_id: int) -> bool:
        return self.get(doc_id) is not None

    def set(self, doc_id: int, row: int) -> None:
        if self.get(doc_id) is None:
            self._count += 1
        if doc_id >= len(self._table) and doc_id < 4 * self._count + _SLACK:
            self._grow(doc_id + 1)
        if 0 <= doc_id < len(self._table):
            self._table[doc_id] = row
        else:
            self._other[doc_id] = row

    def pop(self, doc_id: int) -> int | None:
        """The row of `doc_id`, which no longer has one; None if it had none."""
        row = self.get(doc_id)
        if row is None:
            return None
        self._count -= 1
        if 0 <= doc_id < len(self._table):
            self._table[doc_id] = _ABSENT
        else:
            del self._other[doc_id]
        return row

    def rows(self, ids: np.ndarray) -> np.ndarray:
        """(n,) int64 rows of ids (n,), -1 where an id has none."""
        ids = np.asarray(ids, dtype=np.int64)
        rows = np.full(len(ids), _ABSENT, dtype=np.int64)
        inside = (ids >= 0) & (ids < len(self._table))  # (n,)
        rows[inside] = self._table[ids[inside]]
        if self._other:
            for position in np.flatnonzero(~inside).tolist():
                rows[position] = self._other.get(int(ids[position]), _ABSENT)
        return rows

    def _grow(self, size: int) -> None:
        """Cover ids below `size` (rounded up to a power of two), moving them out of the dict."""
        size = 1 << (size - 1).bit_length()
        table = np.full(size, _ABSENT, dtype=np.int64)
        table[: len(self._table)] = self._table
        self._table = table
        for doc_id in [i for i in self._other if 0 <= i < size]:
            table[doc_id] = self._other.pop(doc_id)
