"""`StrictJSONRoute`: the route class of every router that takes a JSON body.

Each body is parsed by `parse_strict_json` (core/strict_json.py). The routes that need nothing
but one JSON body model and dependencies of the request alone, and whose endpoint returns a
Response itself (POST /encode, /v1/embeddings and /search), are served by a lean handler instead
of FastAPI's. On every request FastAPI's builds a Response for dependencies to set headers on,
parses the query string and the cookies, keys a cache for each dependency, and validates the
body through a TypeAdapter. The lean handler validates the body with its model, awaits the
dependencies in FastAPI's order, each once per request, and awaits the endpoint: the event
loop's CPU per one-text POST /encode in-process fell from 0.25 to 0.15 ms, that of one bare
FastAPI route (`python -m bench.asgi_stack`, docs/benchmarks.md).

Whatever it does not expect goes to FastAPI's own handler, with the same request: a content
type other than application/json, a body that is not JSON or not valid for its model, a client
gone before its body came, dependency overrides. So every error is FastAPI's, shaped by
service/errors.py as before. It solves the route's own dependencies, which include its
router's (`APIRouter(dependencies=...)`) but not those given to `include_router`: the API key
is a router's own dependency for that reason (service/auth.py).
"""

import inspect
from collections.abc import Callable, Coroutine
from dataclasses import replace
from typing import Any

from fastapi import Request, Response, params
from fastapi.dependencies.models import Dependant
from fastapi.routing import APIRoute
from pydantic import BaseModel
from starlette.requests import ClientDisconnect

from core.strict_json import parse_strict_json

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class StrictJSONRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            max_depth = self.app.state.services.settings.max_json_depth
            self._json = parse_strict_json(await self.body(), max_depth)
        return self._json


def _takes_only_the_request(dependant: Dependant) -> bool:
    """Whether `dependant` takes nothing but the request (as a Request or an HTTPConnection) and
    its dependencies' values."""
    return not any(
        (
            dependant.path_params,
            dependant.query_params,
            dependant.header_params,
            dependant.cookie_params,
            dependant.body_params,
            dependant.websocket_param_name,
            dependant.response_param_name,
            dependant.background_tasks_param_name,
            dependant.security_scopes_param_name,
            dependant.own_oauth_scopes,
        )
    )


def _is_awaited_dependency(dependant: Dependant) -> bool:
    """An async function (or an object with an async __call__, as FastAPI's security schemes
    are) of the request and of dependencies like itself: no threads, no yield, no scopes."""
    call = dependant.call
    awaitable = inspect.iscoroutinefunction(call) or inspect.iscoroutinefunction(
        getattr(call, "__call__", None)  # noqa: B004 - whether the call is async, not callable
    )
    return (
        awaitable
        and dependant.concurrency is None
        and _takes_only_the_request(dependant)
        and all(_is_awaited_dependency(sub) for sub in dependant.dependencies)
    )


def _lean_body_model(route: APIRoute) -> type[BaseModel] | None:
    """The body model of a route the lean handler can serve; None for any other route."""
    dependant = route.dependant
    if len(dependant.body_params) != 1 or not inspect.iscoroutinefunction(route.endpoint):
        return None
    field_info = dependant.body_params[0].field_info
    model = field_info.annotation
    returns = inspect.signature(route.endpoint).return_annotation
    if (
        getattr(field_info, "embed", False)
        or isinstance(field_info, params.Form)
        or not (isinstance(model, type) and issubclass(model, BaseModel))
        or not (isinstance(returns, type) and issubclass(returns, Response))
    ):
        return None
    rest = replace(dependant, body_params=[])
    if not _takes_only_the_request(rest) or not all(
        _is_awaited_dependency(sub) for sub in dependant.dependencies
    ):
        return None
    return model


async def _arguments(
    dependant: Dependant, request: Request, solved: dict[int, Any]
) -> dict[str, Any]:
    """`dependant.call`'s keyword arguments: the request, and its dependencies' values, each
    computed once per request unless it asks not to be cached (FastAPI's `use_cache`)."""
    values: dict[str, Any] = {}
    for sub in dependant.dependencies:
        key = id(sub.call)
        if sub.use_cache and key in solved:
            value = solved[key]
        else:
            value = await sub.call(**await _arguments(sub, request, solved))
            solved.setdefault(key, value)
        if sub.name is not None:
            values[sub.name] = value
    for name in (dependant.request_param_name, dependant.http_connection_param_name):
        if name is not None:
            values[name] = request
    return values


def _lean_handler(route: APIRoute, model: type[BaseModel], fastapi_handler: Handler) -> Handler:
    dependant = route.dependant
    body_name = dependant.body_params[0].name
    endpoint = route.endpoint

    async def handle(request: Request) -> Response:
        media_type = request.headers.get("content-type", "").partition(";")[0]
        if media_type.strip().lower() != "application/json" or request.app.dependency_overrides:
            return await fastapi_handler(request)
        try:
            body = model.model_validate(await request.json())
        except (ValueError, ClientDisconnect):  # pydantic's ValidationError is a ValueError
            # The body, and its parse where there is one, stay on the request for FastAPI.
            return await fastapi_handler(request)
        arguments = await _arguments(dependant, request, {})
        arguments[body_name] = body
        return await endpoint(**arguments)

    return handle


class StrictJSONRoute(APIRoute):
    """Use as `APIRouter(route_class=StrictJSONRoute)` for every router that takes a body."""

    @property
    def is_lean(self) -> bool:
        """Whether its requests skip FastAPI's handler when all is as expected (the module's
        docstring says when)."""
        return _lean_body_model(self) is not None

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()
        model = _lean_body_model(self)
        chosen = handler if model is None else _lean_handler(self, model, handler)

        async def strict_handler(request: Request) -> Response:
            return await chosen(StrictJSONRequest(request.scope, request.receive))

        return strict_handler
