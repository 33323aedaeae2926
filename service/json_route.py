"""`StrictJSONRoute`: the route class of every router that takes a JSON body."""

from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from service.limits import parse_strict_json


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            max_depth = self.app.state.services.settings.max_json_depth
            self._json = parse_strict_json(await self.body(), max_depth)
        return self._json


class StrictJSONRoute(APIRoute):
    """Use as `APIRouter(route_class=StrictJSONRoute)` for every router that takes a body."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(StrictJSONRequest(request.scope, request.receive))

        return strict_handler
