"""Optional API key for data endpoints: `Authorization: Bearer <key>`, compared in constant time.

`create_app` adds `require_api_key` to the data routers only when a key is configured, so the
OpenAPI document declares the bearer scheme exactly when the server enforces it.
"""

import hmac
from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import SecretStr

from service.dependencies import SettingsDep
from service.errors import UnauthorizedError

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
