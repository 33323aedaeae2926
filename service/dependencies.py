"""What route handlers receive: the app's shared services and the engine a request uses.

Import these `Annotated` aliases in any router: `engine: EngineDep` takes `holder.current`
once, records its version for the X-Model-Version header, and is a 503 until a model is live.
"""

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Annotated

from fastapi import Depends, Request

from core.settings import Settings
from service.batching import Batcher
from service.engine import Engine, EngineHolder
from service.engine_switch import EngineSwitch
from service.errors import NotReadyError
from service.limits import Limits
from service.metrics import SCOPE_MODEL_VERSION, Metrics

ReadinessCheck = Callable[[], str | None]


@dataclass
class Services:
    """Everything one app instance shares; lives on `app.state.services`."""

    settings: Settings
    limits: Limits
    holder: EngineHolder
    metrics: Metrics
    batcher: Batcher
    switch: EngineSwitch  # the only writer of holder
    # Components that must be loaded before /ready says so: each returns None when ready,
    # else why not (the engine itself is checked by the engine dependency).
    readiness: list[ReadinessCheck] = field(default_factory=list)


def services_of(request: Request) -> Services:
    return request.app.state.services


# Each dependency reads the services off the request itself rather than through a shared
# ServicesDep node: FastAPI solves every node on every request, and without that one the event
# loop's CPU per POST /encode fell from 0.20 to 0.17 ms (in-process, as bench.asgi_stack
# measures it).
async def get_services(request: Request) -> Services:
    return services_of(request)


async def get_settings_dep(request: Request) -> Settings:
    return services_of(request).settings


async def get_batcher(request: Request) -> Batcher:
    return services_of(request).batcher


async def current_engine(request: Request) -> Engine:
    holder = services_of(request).holder
    engine = holder.current
    if engine is None:
        raise NotReadyError(holder.load_error or NotReadyError().message)
    request.scope[SCOPE_MODEL_VERSION] = engine.version
    return engine


ServicesDep = Annotated[Services, Depends(get_services)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
BatcherDep = Annotated[Batcher, Depends(get_batcher)]
EngineDep = Annotated[Engine, Depends(current_engine)]
