"""The faiss side of the search index: document vectors under int64 ids, flat until an IVF is
trained (models/index_config.py), with the optional GPU copy for unfiltered searches.

Not thread-safe: models/index.py's SearchIndex calls it under its lock.
"""

import faiss
import numpy as np

from models.faiss_gpu import GpuMirror, gpu_available, one_faiss_thread
from models.index_config import IndexConfig, IndexKind

# faiss keeps a flat search's best k in a heap below this k and in a "reservoir" (a buffer
# partitioned when full) from it on; its default, 100, is exactly the candidates a search asks
# for. For one query over 1M documents the reservoir cost 4.5-7 ms more than the heap at every
# k from 100 to 1,000, and 4 ms more at 2,000 (58-62 ms for a heap scan; a script alternating
# the two, AMD EPYC Zen 4, load 0.9), so a search's k (max_search_candidates plus
# max_search_offset at most: 2,000 by default) takes the heap. It is faiss's setting, for the
# whole process.
faiss.cvar.distance_compute_min_k_reservoir = 1 << 14


class FaissVectors:
    def __init__(self, dim: int, config: IndexConfig) -> None:
        self.dim = dim
        self.config = config
        self._index: faiss.Index = faiss.IndexIDMap2(faiss.IndexFlatIP(dim))
        self._is_ivf = False
        self._gpu = GpuMirror() if config.use_gpu and gpu_available() else None

    @property
    def kind(self) -> IndexKind:
        """What answers searches now ("flat" until an "ivf" index is trained)."""
        return "ivf" if self._is_ivf else "flat"

    @property
    def on_gpu(self) -> bool:
        return self._gpu is not None

    def add(self, ids: np.ndarray, vectors: np.ndarray) -> None:
        """Add (n,) new ids with their (n, dim) unit vectors."""
        self._index.add_with_ids(vectors, ids)
        self._invalidate_gpu()

    def remove(self, ids: np.ndarray) -> None:
        """Remove (n,) ids, every one of them present."""
        # IDSelectorArray lets the IVF hash-table direct map remove by lookup, not by a scan.
        self._index.remove_ids(faiss.IDSelectorArray(ids))
        self._invalidate_gpu()

    def reconstruct(self, ids: np.ndarray) -> np.ndarray:
        """The stored vectors (n, dim) of present ids."""
        if len(ids) == 0:
            return np.empty((0, self.dim), dtype=np.float32)
        return self._index.reconstruct_batch(ids)  # (n, dim)

    def search(
        self, query: np.ndarray, k: int, allowed: np.ndarray | None, *, with_vectors: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        """(ids, inner products, their vectors (n, dim) if asked for) of up to k documents,
        best first, among `allowed` ids (None: all); `query` is (1, dim) and k at most the
        number of documents allowed.

        faiss copies the vectors out of the lists it scanned: 100 candidates of an IVF over 1M
        documents took 2.29 ms with their vectors, 2.25 ms searched and then looked up by id,
        2.13 ms without them (AMD EPYC Zen 4, a script alternating the three, load 0.7). So a
        search that needs few of them reads them later (models/candidates.py)."""
        if allowed is not None and len(allowed) <= k:
            # Every allowed document is a candidate: nothing to search.
            vectors = self.reconstruct(allowed)  # (k, dim)
            scores = vectors @ query[0]  # (k,)
            order = np.lexsort((allowed, -scores))
            return allowed[order], scores[order], vectors[order] if with_vectors else None
        return self._search(query, k, allowed, with_vectors=with_vectors)

    def _search(
        self, query: np.ndarray, k: int, allowed: np.ndarray | None, *, with_vectors: bool
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
        if allowed is None and self._gpu is not None:
            scores, labels = self._gpu.search(self._index, query, k)
            if (labels[0] >= 0).sum() == k:
                ids = labels[0].astype(np.int64)
                return ids, scores[0], self.reconstruct(ids) if with_vectors else None
        selector = None if allowed is None else faiss.IDSelectorBatch(allowed)
        nprobe = self.config.nprobe
        while True:
            params = self._search_params(selector, nprobe)
            vectors = None
            with one_faiss_thread():
                if with_vectors:
                    scores, labels, vectors = self._index.search_and_reconstruct(
                        query, k, params=params
                    )
                else:
                    scores, labels = self._index.search(query, k, params=params)
            found = labels[0] >= 0
            # An IVF whose probed lists hold fewer than k (allowed) documents probes more lists;
            # at nprobe = nlist it has seen every document, so the list is then complete.
            if found.sum() == k or not self._is_ivf or nprobe >= self.config.nlist:
                rows = None if vectors is None else vectors[0][found]  # (n, dim)
                return labels[0][found].astype(np.int64), scores[0][found], rows
            nprobe = min(self.config.nlist, nprobe * 4)

    def train_ivf(self, ids: np.ndarray) -> None:
        """Replace the flat index by an IVF trained on the vectors of `ids` (every document)."""
        vectors = self.reconstruct(ids)  # (n, dim)
        quantizer = faiss.IndexFlatIP(self.dim)
        ivf = faiss.IndexIVFFlat(quantizer, self.dim, self.config.nlist, faiss.METRIC_INNER_PRODUCT)
        ivf.train(vectors)
        ivf.set_direct_map_type(faiss.DirectMap.Hashtable)
        ivf.add_with_ids(vectors, ids)
        ivf.nprobe = self.config.nprobe
        self._index = ivf
        self._is_ivf = True
        self._invalidate_gpu()

    def _search_params(
        self, selector: faiss.IDSelector | None, nprobe: int
    ) -> faiss.SearchParameters | None:
        if self._is_ivf:
            return faiss.SearchParametersIVF(sel=selector, nprobe=nprobe)
        return None if selector is None else faiss.SearchParameters(sel=selector)

    def _invalidate_gpu(self) -> None:
        if self._gpu is not None:
            self._gpu.invalidate()
