"""Search index over document embeddings: faiss candidates, rescored with Eq. 7.

Reference: Seonwoo et al., "Ranking-Enhanced Unsupervised Sentence Representation Learning"
(ACL 2023), Eq. 7: sim = lambda_inf * z_q.z_d + (1 - lambda_inf) * cos(q, d), with z the
normalised rank vectors of Eq. 2-3 against the anchor matrix.

faiss proposes `candidates` documents by inner product (= cosine, every vector is unit length);
Eq. 7 rescores them (models/rescoring.py), computing rank vectors at query time only for the
candidates that could still reach the top_k. Optionally a RankStore (models/rank_store.py)
keeps every document's ranks quantised to 8 or 4 bits, in step with upsert and remove and
filled for existing documents by `backfill_ranks`, neighbours side by side (`neighbour_order`);
its rows bound each candidate's score (exact search) or stand for its rank vector
(approximate), under the anchors they were built for (`anchors_key`) only.

The faiss index itself, flat or IVF, with its GPU copy: models/faiss_vectors.py.

Metadata filters (models/metadata_filter.py: Qdrant's must/should/must_not, match, range,
is_null, is_empty; or a flat equality object) are evaluated on posting lists into the set of
allowed ids. They restrict the faiss search itself (an `IDSelector`), and an IVF that cannot
fill the candidate list from the allowed documents probes more lists, up to all of them, so a
filter never shortens the result below min(top_k, number of matching documents).
"""

import threading
from collections.abc import Iterable, Sequence

import numpy as np
import torch

from models.candidates import Candidates, CandidatesChangedError, from_scores, with_embeddings
from models.faiss_vectors import FaissVectors
from models.index_config import IndexConfig, IndexKind
from models.locality import neighbour_order
from models.metadata_filter import Metadata, Where, as_filter
from models.metadata_filter import Scalar as Scalar  # re-exported: core/documents.py uses it
from models.metadata_terms import MetadataPostings
from models.rank_store import RankStore
from models.rescoring import SearchHits, StoredRanks, query_vectors, rescore
from models.spare_core import Pending


class SearchIndex:
    """Document embeddings under int64 ids, with their filterable metadata terms.

    Thread-safe: writes and the faiss part of a search hold one lock; Eq. 7 rescoring, the
    expensive part, runs outside it, taking it again only to read the candidates' embeddings
    or rank codes it needs.
    """

    def __init__(self, dim: int, config: IndexConfig | None = None) -> None:
        self.dim = dim
        self.config = config or IndexConfig()
        self._lock = threading.Lock()
        self._vectors = FaissVectors(dim, self.config)
        self._terms = MetadataPostings()  # every stored id, and the filters' posting lists
        self._ranks: RankStore | None = None  # quantised document ranks, when attached
        self._writes = 0  # upserts and removals so far: a search between two locks checks it

    def __len__(self) -> int:
        return len(self._terms)

    def __contains__(self, doc_id: int) -> bool:
        return doc_id in self._terms

    @property
    def kind(self) -> IndexKind:
        """What answers candidate searches now ("flat" until an "ivf" index is trained)."""
        return self._vectors.kind

    @property
    def on_gpu(self) -> bool:
        return self._vectors.on_gpu

    @property
    def rank_store(self) -> RankStore | None:
        return self._ranks

    def attach_rank_store(self, store: RankStore | None) -> np.ndarray:
        """Use `store` (None: no store) from now on; returns the ids it still lacks (n,).

        Every later upsert writes its rows; `backfill_ranks` fills those of the ids returned.
        """
        with self._lock:
            previous, self._ranks = self._ranks, store
            if previous is not None and previous is not store:
                previous.close()  # searches read its rows only under the lock: none still does
            if store is None:
                return np.empty(0, dtype=np.int64)
            return np.array([i for i in self._terms if i not in store], dtype=np.int64)

    def backfill_ranks(self, store: RankStore, ids: np.ndarray) -> int | None:
        """Compute and store the rows of `ids` that `store` lacks; None once it is detached.

        The ranks are computed outside the lock; a row is stored only if its document still
        has the embedding it was computed from and no upsert has written it meanwhile.
        """
        with self._lock:
            if self._ranks is not store:
                return None
            todo = np.array([i for i in ids.tolist() if i in self._terms and i not in store])
            todo = todo.astype(np.int64)  # (n,)
            vectors = self._vectors.reconstruct(todo)  # (n, dim)
        codes = store.encode_embeddings(vectors)  # (n, row_bytes)
        with self._lock:
            if self._ranks is not store:
                return None
            keep = np.array([i in self._terms and i not in store for i in todo.tolist()], bool)
            unchanged = np.zeros(len(todo), dtype=bool)
            if keep.any():
                current = self._vectors.reconstruct(todo[keep])  # (k, dim)
                unchanged[keep] = (current == vectors[keep]).all(axis=1)
            return store.put(todo[unchanged], codes[unchanged])

    def neighbour_order(self, ids: np.ndarray) -> np.ndarray:
        """`ids` (n,) reordered so that documents near each other come together: the order to
        backfill a rank store in (models/locality.py). The embeddings are read a chunk at a
        time under the lock; an id removed meanwhile is placed anywhere, and backfill skips it.
        """

        def vectors(positions: np.ndarray) -> np.ndarray:
            wanted = ids[positions]  # (p,)
            out = np.zeros((len(wanted), self.dim), dtype=np.float32)  # (p, dim)
            with self._lock:
                present = np.array([i in self._terms for i in wanted.tolist()], dtype=bool)
                out[present] = self._vectors.reconstruct(wanted[present])
            return out

        return ids[neighbour_order(len(ids), vectors)]

    def upsert(
        self,
        ids: Sequence[int] | np.ndarray,
        embeddings: np.ndarray | torch.Tensor,
        metadata: Sequence[Metadata | None] | None = None,
    ) -> None:
        """Insert or replace documents; `embeddings` (n, dim) must be L2-normalised."""
        id_array = np.asarray(ids, dtype=np.int64).reshape(-1)  # (n,)
        vectors = _as_float32(embeddings)  # (n, dim)
        if vectors.shape != (len(id_array), self.dim):
            raise ValueError(f"expected ({len(id_array)}, {self.dim}) embeddings")
        if len(np.unique(id_array)) != len(id_array):
            raise ValueError("duplicate ids in one upsert")
        metas = list(metadata) if metadata is not None else [None] * len(id_array)
        if len(metas) != len(id_array):
            raise ValueError("one metadata entry per id")
        if len(id_array) == 0:
            return
        store = self._ranks
        # The expensive part (a matmul and a sort per document) before taking the lock.
        codes = store.encode_embeddings(vectors) if store is not None else None
        with self._lock:
            self._writes += 1
            self._remove_locked(id_array)
            self._vectors.add(id_array, vectors)
            if self._ranks is not None:
                if self._ranks is not store or codes is None:  # a store attached meanwhile
                    codes = self._ranks.encode_embeddings(vectors)
                self._ranks.put(id_array, codes)
            for doc_id, meta in zip(id_array.tolist(), metas, strict=True):
                self._terms.add(doc_id, meta)
            ivf_due = self.config.kind == "ivf" and self._vectors.kind == "flat"
            if ivf_due and len(self._terms) >= self.config.ivf_train_size:
                self._vectors.train_ivf(self._all_ids_locked())

    def remove(self, ids: Iterable[int]) -> int:
        """Remove documents by id; unknown ids are ignored. Returns how many were removed."""
        id_array = np.unique(np.fromiter(ids, dtype=np.int64))
        with self._lock:
            removed = self._remove_locked(id_array)
            self._writes += removed > 0  # removing nothing spoils no search in flight
            return removed

    def embeddings(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Stored embeddings (n, dim) of known ids."""
        with self._lock:
            return self._vectors.reconstruct(np.asarray(ids, dtype=np.int64))

    def candidates(
        self, query: np.ndarray | torch.Tensor, k: int, where: Where = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Up to k (ids, cosines) by inner product, best first: the cosine-only search."""
        with self._lock:
            ids, scores, _ = self._candidates_locked(
                _as_float32(query).reshape(1, -1), k, where, with_vectors=False
            )
            return ids, scores

    def search(
        self,
        query: torch.Tensor,
        anchors: torch.Tensor,
        *,
        top_k: int,
        candidates: int,
        lambda_inf: float,
        where: Where = None,
        anchors_key: str | None = None,
        exact: bool = True,
    ) -> SearchHits:
        """faiss proposes max(candidates, top_k) documents; Eq. 7 orders them; top_k are kept.

        `query` (dim,) is a unit embedding, `anchors` (m, dim) the anchor matrix; rescoring runs
        on the anchors' device. `anchors_key` (AnchorSet.key) lets the attached rank store, if
        it was built for these anchors, rule out candidates (exact) or score them (not exact).
        """
        if top_k < 1:
            raise ValueError("top_k must be positive")
        query_np = _as_float32(query).reshape(1, -1)  # (1, dim)
        k = max(candidates, top_k)
        store = self._ranks
        if store is not None and (anchors_key is None or store.anchors_key != anchors_key):
            store = None

        def search(read_later: bool) -> SearchHits:
            found, stored = self._search(query, anchors, query_np, k, where, store, read_later)
            return rescore(
                query,
                anchors,
                found,
                stored=stored,
                lambda_inf=lambda_inf,
                top_k=top_k,
                exact=exact,
            )

        if not self._vectors.on_gpu:
            try:
                return search(read_later=True)
            except CandidatesChangedError:
                pass  # rare: a write came between faiss and an embedding's read
        return search(read_later=False)

    def _search(
        self,
        query: torch.Tensor,
        anchors: torch.Tensor,
        query_np: np.ndarray,
        k: int,
        where: Where,
        store: RankStore | None,
        read_later: bool,
    ) -> tuple[Candidates, StoredRanks | None]:
        """faiss's candidates, and the codes of `store` for them.

        read_later: the candidates' cosines are faiss's scores, and their embeddings are read
        only where rank vectors need them (models/candidates.py), which is right on CPU, where
        faiss's scores are float32 sums; a write before such a read raises CandidatesChangedError.
        Otherwise every embedding is copied out with the candidates: where faiss runs on a
        GPU, and after a write spoiled a search that read them later.
        """
        # The codes need the query's rank vector: the spare core makes it while faiss scans,
        # and the lock is not held while it is awaited, so writes and other searches go on.
        pending = None if store is None else Pending(lambda: query_vectors(query, anchors)[1])
        with self._lock:
            ids, scores, vectors = self._candidates_locked(
                query_np, k, where, with_vectors=not read_later
            )
            writes = self._writes
        if vectors is None:

            def read(positions: np.ndarray) -> np.ndarray:
                with self._lock:
                    if self._writes != writes:
                        raise CandidatesChangedError
                    return self._vectors.reconstruct(ids[positions])  # (p, dim)

            found = from_scores(ids, scores, self.dim, read)
        elif self._vectors.on_gpu:
            found = with_embeddings(ids, vectors, query_np[0])
        else:
            found = from_scores(ids, scores, self.dim, vectors.__getitem__)
        if pending is None or store is None:
            return found, None
        query_rank = pending.result()  # (m,)
        with self._lock:
            if self._writes != writes:  # candidates removed or replaced meanwhile are dropped
                if vectors is None:
                    raise CandidatesChangedError
                kept = np.array([i in self._terms for i in ids.tolist()], dtype=bool)
                vectors = self._vectors.reconstruct(ids[kept])  # (c, dim)
                found = with_embeddings(ids[kept], vectors, query_np[0])
                writes = self._writes
        return found, self._stored(store, query_rank, writes)

    def _stored(self, store: RankStore, query_rank: torch.Tensor, writes: int) -> StoredRanks:
        """The codes of `store` against `query_rank` (m,), for candidates found at `writes`."""

        def read(subset: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            """The codes of candidates `subset` (p,), as none where the store was replaced
            (new anchors) or a write came since the candidates were found: a replaced
            document's codes would describe another text."""
            with self._lock:
                if self._writes == writes and self._ranks is store:
                    return store.similarities(subset, query_rank)
            return np.zeros(len(subset), dtype=bool), np.zeros(len(subset), dtype=np.float32)

        return StoredRanks(read, query_rank, store.codec)

    def _all_ids_locked(self) -> np.ndarray:
        return np.fromiter(self._terms, dtype=np.int64, count=len(self._terms))  # (n,)

    def _candidates_locked(
        self, query: np.ndarray, k: int, where: Where, *, with_vectors: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(ids, inner products, their vectors (n, dim) if asked for) of up to k documents,
        best first, all passing `where`."""
        clause = as_filter(where)
        allowed = self._terms.allowed(clause) if clause is not None else None
        k = min(k, len(self._terms) if allowed is None else len(allowed))
        if k == 0:
            empty = np.empty((0, self.dim), dtype=np.float32) if with_vectors else None
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32), empty
        selected = None if allowed is None else _id_array(allowed)
        return self._vectors.search(query, k, selected, with_vectors=with_vectors)

    def _remove_locked(self, ids: np.ndarray) -> int:
        present = np.array([i for i in ids.tolist() if i in self._terms], dtype=np.int64)
        if len(present) == 0:
            return 0
        self._vectors.remove(present)
        if self._ranks is not None:
            self._ranks.remove(present)
        for doc_id in present.tolist():
            self._terms.discard(doc_id)
        return len(present)


def _id_array(ids: set[int]) -> np.ndarray:
    return np.fromiter(ids, dtype=np.int64, count=len(ids))


def _as_float32(values: np.ndarray | torch.Tensor) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float32).numpy()
    return np.ascontiguousarray(values, dtype=np.float32)
