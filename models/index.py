"""Search index over document embeddings: faiss candidates, rescored with Eq. 7.

Reference: Seonwoo et al., "Ranking-Enhanced Unsupervised Sentence Representation Learning"
(ACL 2023), Eq. 7: sim = lambda_inf * z_q.z_d + (1 - lambda_inf) * cos(q, d), with z the
normalised rank vectors of Eq. 2-3 against the anchor matrix.

faiss proposes `candidates` documents by inner product (= cosine, every vector is unit length);
those are rescored exactly with Eq. 7 and the best `top_k` kept. Document rank vectors are
computed at query time from the candidates' stored embeddings, not precomputed: a precomputed
uint16 rank matrix costs 2 * M bytes per document (20 GB per million documents at M = 10,000,
thirteen times the float32 embeddings) and must be rebuilt whenever the anchor matrix changes;
`bench/search.py` measures both sides of that trade.

Index kinds:
- "flat": `IndexIDMap2(IndexFlatIP)`, exact inner-product candidates.
- "ivf": `IndexIVFFlat` with a hash-table direct map (so vectors can be read back and removed by
  id). It needs training, so vectors live in a flat index until `train_size` of them exist; the
  index then trains its coarse quantiser on all of them and moves them over.
When faiss was built with GPU support (`faiss.get_num_gpus() > 0`), unfiltered candidate
searches run on a GPU copy made with `faiss.StandardGpuResources` and refreshed after writes;
filtered searches stay on the CPU index because GPU indexes take no `IDSelector`.

Metadata filters are equality on flat scalar values. They restrict the faiss search itself
(an `IDSelector`), and an IVF that cannot fill the candidate list from the allowed documents
probes more lists, up to all of them, so a filter never shortens the result below
min(top_k, number of matching documents).
"""

import json
import math
import threading
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import faiss
import numpy as np
import torch

from models.faiss_gpu import GpuMirror, gpu_available, one_faiss_thread
from models.ranking import rank_vectors_chunked
from models.rescoring import SearchHits, empty_hits, eq7_scores, top_hits

IndexKind = Literal["flat", "ivf"]
Scalar = str | int | float | bool | None
Term = tuple[str, str]

# Documents read back at once by the exhaustive search: bounds its (chunk, m) rank matrix.
_SCAN_CHUNK = 2048


@dataclass(frozen=True)
class IndexConfig:
    kind: IndexKind = "flat"
    nlist: int = 1024  # IVF inverted lists
    nprobe: int = 32  # IVF lists visited per query
    train_size: int | None = None  # vectors before the IVF is trained; None = 39 * nlist
    use_gpu: bool = True  # only takes effect with a GPU build of faiss and a visible GPU

    def __post_init__(self) -> None:
        if self.nlist < 1 or self.nprobe < 1:
            raise ValueError("nlist and nprobe must be positive")
        if self.train_size is not None and self.train_size < self.nlist:
            raise ValueError("an IVF needs at least nlist training vectors")

    @property
    def ivf_train_size(self) -> int:
        # faiss warns below 39 training points per centroid.
        return self.train_size if self.train_size is not None else 39 * self.nlist


def metadata_terms(metadata: Mapping[str, Scalar] | None) -> tuple[Term, ...]:
    """Canonical (key, value) terms: 1 and 1.0 are one value, True and 1 are not (JSON types)."""
    if not metadata:
        return ()
    return tuple(sorted((key, _canonical(value)) for key, value in metadata.items()))


def _canonical(value: Scalar) -> str:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return json.dumps(int(value))
    return json.dumps(value)


class SearchIndex:
    """Document embeddings under int64 ids, with their filterable metadata terms.

    Thread-safe: writes and the faiss part of a search hold one lock; Eq. 7 rescoring, the
    expensive part, runs outside it on copies of the candidates' embeddings.
    """

    def __init__(self, dim: int, config: IndexConfig | None = None) -> None:
        self.dim = dim
        self.config = config or IndexConfig()
        self._lock = threading.Lock()
        self._index: faiss.Index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self._is_ivf = False
        self._terms: dict[int, tuple[Term, ...]] = {}  # every stored id -> its metadata terms
        self._postings: dict[Term, set[int]] = defaultdict(set)
        self._gpu = GpuMirror() if self.config.use_gpu and gpu_available() else None

    def __len__(self) -> int:
        return len(self._terms)

    def __contains__(self, doc_id: int) -> bool:
        return doc_id in self._terms

    @property
    def kind(self) -> IndexKind:
        """What answers candidate searches now ("flat" until an "ivf" index is trained)."""
        return "ivf" if self._is_ivf else "flat"

    @property
    def on_gpu(self) -> bool:
        return self._gpu is not None

    def upsert(
        self,
        ids: Sequence[int] | np.ndarray,
        embeddings: np.ndarray | torch.Tensor,
        metadata: Sequence[Mapping[str, Scalar] | None] | None = None,
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
        with self._lock:
            self._remove_locked(id_array)
            self._index.add_with_ids(vectors, id_array)
            for doc_id, meta in zip(id_array.tolist(), metas, strict=True):
                terms = metadata_terms(meta)
                self._terms[doc_id] = terms
                for term in terms:
                    self._postings[term].add(doc_id)
            if self.config.kind == "ivf" and not self._is_ivf:
                self._maybe_train_ivf_locked()
            self._invalidate_gpu()

    def remove(self, ids: Iterable[int]) -> int:
        """Remove documents by id; unknown ids are ignored. Returns how many were removed."""
        id_array = np.unique(np.fromiter(ids, dtype=np.int64))
        with self._lock:
            removed = self._remove_locked(id_array)
            if removed:
                self._invalidate_gpu()
            return removed

    def embeddings(self, ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """Stored embeddings (n, dim) of known ids."""
        with self._lock:
            return self._reconstruct_locked(np.asarray(ids, dtype=np.int64))

    def candidates(
        self, query: np.ndarray | torch.Tensor, k: int, where: Mapping[str, Scalar] | None = None
    ) -> tuple[np.ndarray, np.ndarray]:
        """Up to k (ids, cosines) by inner product, best first: the cosine-only search."""
        with self._lock:
            return self._candidates_locked(_as_float32(query).reshape(1, -1), k, where)

    def search(
        self,
        query: torch.Tensor,
        anchors: torch.Tensor,
        *,
        top_k: int,
        candidates: int,
        lambda_inf: float,
        where: Mapping[str, Scalar] | None = None,
    ) -> SearchHits:
        """faiss proposes max(candidates, top_k) documents; Eq. 7 orders them; top_k are kept.

        `query` (dim,) is a unit embedding, `anchors` (m, dim) the anchor matrix; rescoring runs
        on the anchors' device.
        """
        if top_k < 1:
            raise ValueError("top_k must be positive")
        query_np = _as_float32(query).reshape(1, -1)  # (1, dim)
        with self._lock:
            ids, _ = self._candidates_locked(query_np, max(candidates, top_k), where)
            vectors = self._reconstruct_locked(ids)  # (k, dim)
        if len(ids) == 0:
            return empty_hits()
        device = anchors.device
        query_t = query.to(device=device, dtype=torch.float32).reshape(-1)  # (dim,)
        query_rank = rank_vectors_chunked(query_t[None], anchors)[0]  # (m,)
        score, cosine, rank = eq7_scores(
            query_t, query_rank, torch.from_numpy(vectors).to(device), anchors, lambda_inf
        )
        return top_hits(ids, score.cpu().numpy(), cosine.cpu().numpy(), rank.cpu().numpy(), top_k)

    def search_exact(
        self,
        query: torch.Tensor,
        anchors: torch.Tensor,
        *,
        top_k: int,
        lambda_inf: float,
        where: Mapping[str, Scalar] | None = None,
    ) -> SearchHits:
        """Eq. 7 against every (allowed) document: the brute-force reference, O(N * M log M)."""
        with self._lock:
            pool = self._all_ids_locked() if not where else _id_array(self._allowed_locked(where))
        device = anchors.device
        query_t = query.to(device=device, dtype=torch.float32).reshape(-1)  # (dim,)
        query_rank = rank_vectors_chunked(query_t[None], anchors)[0]  # (m,)
        kept = empty_hits()
        for start in range(0, len(pool), _SCAN_CHUNK):
            with self._lock:
                # Documents removed since the snapshot of ids are skipped.
                chunk = np.array(
                    [i for i in pool[start : start + _SCAN_CHUNK].tolist() if i in self._terms],
                    dtype=np.int64,
                )
                vectors = self._reconstruct_locked(chunk)  # (c, dim)
            score, cosine, rank = eq7_scores(
                query_t, query_rank, torch.from_numpy(vectors).to(device), anchors, lambda_inf
            )
            kept = top_hits(
                np.concatenate([kept.ids, chunk]),
                np.concatenate([kept.scores, score.cpu().numpy()]),
                np.concatenate([kept.cosine, cosine.cpu().numpy()]),
                np.concatenate([kept.rank, rank.cpu().numpy()]),
                top_k,
            )
        return kept

    def _all_ids_locked(self) -> np.ndarray:
        return np.fromiter(self._terms, dtype=np.int64, count=len(self._terms))  # (n,)

    def _allowed_locked(self, where: Mapping[str, Scalar]) -> set[int]:
        postings = sorted(
            (self._postings.get(term, set()) for term in metadata_terms(where)), key=len
        )
        allowed = set(postings[0])
        for posting in postings[1:]:
            allowed &= posting
        return allowed

    def _candidates_locked(
        self, query: np.ndarray, k: int, where: Mapping[str, Scalar] | None
    ) -> tuple[np.ndarray, np.ndarray]:
        """(ids, inner products) of up to k documents, best first, all passing `where`."""
        allowed = self._allowed_locked(where) if where else None
        k = min(k, len(self._terms) if allowed is None else len(allowed))
        if k == 0:
            return np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float32)
        if allowed is not None and len(allowed) <= k:
            # Every allowed document is a candidate: nothing to search.
            pool = _id_array(allowed)
            scores = self._reconstruct_locked(pool) @ query[0]  # (k,)
            order = np.lexsort((pool, -scores))
            return pool[order], scores[order]
        if allowed is None and self._gpu is not None:
            scores, labels = self._gpu.search(self._index, query, k)
            if (labels[0] >= 0).sum() == k:
                return labels[0].astype(np.int64), scores[0]
        nprobe = self.config.nprobe
        while True:
            with one_faiss_thread():
                scores, labels = self._index.search(
                    query, k, params=self._search_params(allowed, nprobe)
                )
            found = labels[0] >= 0
            # An IVF whose probed lists hold fewer than k (allowed) documents probes more lists;
            # at nprobe = nlist it has seen every document, so the list is then complete.
            if found.sum() == k or not self._is_ivf or nprobe >= self.config.nlist:
                return labels[0][found].astype(np.int64), scores[0][found]
            nprobe = min(self.config.nlist, nprobe * 4)

    def _search_params(
        self, allowed: set[int] | None, nprobe: int
    ) -> faiss.SearchParameters | None:
        selector = None if allowed is None else faiss.IDSelectorBatch(_id_array(allowed))
        if self._is_ivf:
            return faiss.SearchParametersIVF(sel=selector, nprobe=nprobe)
        return None if selector is None else faiss.SearchParameters(sel=selector)

    def _reconstruct_locked(self, ids: np.ndarray) -> np.ndarray:
        if len(ids) == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._index.reconstruct_batch(ids)  # (n, dim)

    def _remove_locked(self, ids: np.ndarray) -> int:
        present = np.array([i for i in ids.tolist() if i in self._terms], dtype=np.int64)
        if len(present) == 0:
            return 0
        # IDSelectorArray lets the IVF hash-table direct map remove by lookup, not by a scan.
        self._index.remove_ids(faiss.IDSelectorArray(present))
        for doc_id in present.tolist():
            for term in self._terms.pop(doc_id):
                posting = self._postings[term]
                posting.discard(doc_id)
                if not posting:
                    del self._postings[term]
        return len(present)

    def _maybe_train_ivf_locked(self) -> None:
        if len(self._terms) < self.config.ivf_train_size:
            return
        ids = self._all_ids_locked()
        vectors = self._reconstruct_locked(ids)  # (n, dim)
        quantizer = faiss.IndexFlatIP(self.dim)
        ivf = faiss.IndexIVFFlat(quantizer, self.dim, self.config.nlist, faiss.METRIC_INNER_PRODUCT)
        ivf.train(vectors)
        ivf.set_direct_map_type(faiss.DirectMap.Hashtable)
        ivf.add_with_ids(vectors, ids)
        ivf.nprobe = self.config.nprobe
        self._index = ivf
        self._is_ivf = True

    def _invalidate_gpu(self) -> None:
        if self._gpu is not None:
            self._gpu.invalidate()


def _id_array(ids: set[int]) -> np.ndarray:
    return np.fromiter(ids, dtype=np.int64, count=len(ids))


def _as_float32(values: np.ndarray | torch.Tensor) -> np.ndarray:
    if isinstance(values, torch.Tensor):
        values = values.detach().to("cpu", torch.float32).numpy()
    return np.ascontiguousarray(values, dtype=np.float32)
