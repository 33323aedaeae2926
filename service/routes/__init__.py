"""One APIRouter per resource, each built by `build_router(settings)` (limits live in schemas)."""

from collections.abc import Callable

from fastapi import APIRouter

from core.settings import Settings

RouterFactory = Callable[[Settings], APIRouter]
