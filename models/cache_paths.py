"""The layout of the derived-data cache (RANKSERVE_VAR_DIR/cache), decided here only.

Everything under it is derived and keyed by what it depends on (encoder checksum and backend,
texts, settings): any file can be deleted and is rebuilt on next use.
"""

from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CachePaths:
    root: Path

    @property
    def anchors(self) -> Path:
        """Anchor matrices, .npy per (encoder, anchor texts, M): models/anchors.py."""
        return self.root / "anchors"

    @property
    def embeddings(self) -> Path:
        """Document embeddings, one SQLite file per encoder: core/embedding_cache.py."""
        return self.root / "embeddings"

    @property
    def encoder_variants(self) -> Path:
        """Exported encoder backends (ONNX, int8, OpenVINO) per checkpoint: models/backends.py."""
        return self.root / "encoder-variants"

    @property
    def backend_choices(self) -> Path:
        """`auto`'s parity and speed measurements per checkpoint and CPU: core/backend_choice.py."""
        return self.root / "backend-choices"

    @property
    def teacher_embeddings(self) -> Path:
        """A teacher's embeddings of a training text: models/training/signals.py."""
        return self.root / "teacher-embeddings"

    @property
    def teacher_signals(self) -> Path:
        """In-batch teacher matrices per batch schedule: models/training/signals.py."""
        return self.root / "teacher-signals"

    @property
    def dev_predictions(self) -> Path:
        """Per-pair dev-set scores per model and setup: models/training/dev_eval.py."""
        return self.root / "dev-predictions"
