"""Optional API key for data endpoints: `Authorization: Bearer <key>`, compared in constant time.

Every data router is built by `data_router`, which adds `require_api_key` only when a key is
configured, so the OpenAPI document declares the bearer scheme exactly when the server enforces
it.
"""

import hmac
from typing import Annotated

from fastapi import APIRouter, Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import SecretStr

from core.settings import Settings
from service.dependencies import SettingsDep
from service.errors import UnauthorizedError, error_responses
from service.json_route import StrictJSONRoute

bearer_scheme = HTTPBearer(auto_error=False, scheme_name="ApiKey", description="RANKSERVE_API_KEY")


def bearer_matches(credentials: HTTPAuthorizationCredentials | None, secret: SecretStr) -> bool:
    """Whether the request's bearer token is `secret`, compared in constant time."""
    if credentials is None:
        return False
    # compare_digest's time depends only on the length of the token given, never on where
    # the two differ.
    return hmac.compare_digest(credentials.credentials.encode(), secret.get_secret_value().encode())


async def require_api_key(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> None:
    if settings.api_key is not None and not bearer_matches(credentials, settings.api_key):
        raise UnauthorizedError()


def data_router(settings: Settings, tag: str) -> APIRouter:
    """A router of data routes: JSON bodies parsed strictly, behind the API key when one is set.

    The key is the router's own dependency, not one given to `include_router`: FastAPI keeps
    those apart from the route's `dependant`, which is what StrictJSONRoute's lean handler
    solves (service/json_route.py).
    """
    protected = settings.api_key is not None
    return APIRouter(
        tags=[tag],
        route_class=StrictJSONRoute,
        dependencies=[Depends(require_api_key)] if protected else [],
        responses=error_responses(UnauthorizedError) if protected else {},
    )
