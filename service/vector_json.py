"""`VectorJSONResponse`: a JSON body with embedding vectors in it, written by orjson straight
from the float32 arrays.

Through the route's pydantic model, a vector is copied into Python floats, validated twice
and written as the float64 each widens to (17 significant digits). orjson writes each float32
as the shortest decimal that reads back as the same float32, as TEI does: one text's /encode
body shrinks from 8.1 to 4.8 KB, and writing it from 35 to 9 µs of the event loop's time
(docs/benchmarks.md). A client that reads the numbers as float32 gets the very values the
encoder computed; as float64, they differ from the widened float32 by less than half a
float32 step.

The route keeps its `response_model`, so the OpenAPI document still describes the body;
the tests check each body against that model.
"""

from typing import Any

import numpy as np
import orjson
import torch
from starlette.responses import Response


def float32_rows(vectors: torch.Tensor) -> np.ndarray:
    """(n, dim) CPU tensor → the C-contiguous float32 array orjson serialises natively."""
    return np.ascontiguousarray(vectors.numpy(), dtype=np.float32)


class VectorJSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        return orjson.dumps(content, option=orjson.OPT_SERIALIZE_NUMPY)
