"""Optional API key for data endpoints: `Authorization: Bearer <key>`, compared in constant time.

`create_app` adds `require_api_key` to the data routers only when a key is configured, so the
OpenAPI document declares the bearer scheme exactly when the server enforces it.
"""

import hmac
from typing import Annotated

from fastapi import Depends
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from service.dependencies import SettingsDep
from service.errors import UnauthorizedError

bearer_scheme = HTTPBearer(auto_error=False, scheme_name="ApiKey", description="RANKSERVE_API_KEY")


def require_api_key(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer_scheme)],
) -> None:
    if settings.api_key is None:
        return
    expected = settings.api_key.get_secret_value().encode()
    given = credentials.credentials.encode() if credentials is not None else b""
    # compare_digest's time depends only on the length of `given`, never on where they differ.
    if credentials is None or not hmac.compare_digest(given, expected):
        raise UnauthorizedError()
