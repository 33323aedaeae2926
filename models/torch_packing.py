"""torch fp32 passes packed (models/packing.py): the transformer of a sentence pipeline given
each row's positions and block-diagonal mask, its token states pooled here."""

from collections.abc import Mapping

import numpy as np
import torch
from sentence_transformers import SentenceTransformer

from models.packing import PACK_MASK, POSITION_IDS, ROW_TOKENS, Pooling, pack


class TorchPackedRunner:
    """The pipeline's transformer on the CPU, in packed passes: tokenizer features in, (texts,
    dim) embeddings out, pooled as the pipeline pools (`pooling`)."""

    packed = True

    def __init__(self, model: SentenceTransformer, pooling: Pooling) -> None:
        self.transformer = model[0].auto_model
        self.pooling = pooling

    def __call__(self, features: Mapping[str, np.ndarray]) -> np.ndarray:
        names = [name for name in ("input_ids", "token_type_ids") if name in features]
        packed = pack(features, names, ROW_TOKENS, 1, np.dtype(np.float32))
        arguments = {name: torch.from_numpy(packed.inputs[name]) for name in names}
        with torch.inference_mode():
            states = self.transformer(
                **arguments,
                position_ids=torch.from_numpy(packed.inputs[POSITION_IDS]),
                # A 4-D float mask, which transformers adds to the attention scores as it is.
                attention_mask=torch.from_numpy(packed.inputs[PACK_MASK]),
            ).last_hidden_state  # (rows, tokens, dim)
        return packed.pool(states.numpy(), self.pooling)
