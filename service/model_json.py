"""`ModelJSONResponse`: a pydantic model's JSON, for routes that write their own response.

FastAPI validates a returned model once more against the route's `response_model` before it
writes it; a route whose endpoint builds its model itself writes it directly, and so keeps to
StrictJSONRoute's lean handler (service/json_route.py). The route keeps its `response_model`,
so the OpenAPI document still describes the body.
"""

from typing import Any

from pydantic import BaseModel
from starlette.responses import Response


class ModelJSONResponse(Response):
    media_type = "application/json"

    def render(self, content: Any) -> bytes:
        if not isinstance(content, BaseModel):
            raise TypeError(f"ModelJSONResponse writes pydantic models, not {type(content)}")
        # by_alias: FastAPI's default for response models, so the body is what it wrote.
        return content.model_dump_json(by_alias=True).encode()
