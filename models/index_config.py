"""What kind of faiss index holds the documents (models/index.py), and its parameters.

- "flat": `IndexIDMap2(IndexFlatIP)`, exact inner-product candidates.
- "ivf": `IndexIVFFlat` with a hash-table direct map (so vectors can be read back and removed by
  id). It needs training, so vectors live in a flat index until `train_size` of them exist; the
  index then trains its coarse quantiser on all of them and moves them over.
When faiss was built with GPU support (`faiss.get_num_gpus() > 0`), unfiltered candidate
searches run on a GPU copy made with `faiss.StandardGpuResources` and refreshed after writes;
filtered searches stay on the CPU index because GPU indexes take no `IDSelector`.
"""

from dataclasses import dataclass
from typing import Literal

IndexKind = Literal["flat", "ivf"]


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
