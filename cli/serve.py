"""`rankserve serve`: the HTTP API under uvicorn (OpenAPI docs at /docs), with the server limits
of service/server.py."""

from contextlib import ExitStack
from typing import Annotated

import typer

from core.settings import get_settings
from service.corpus.local_redis import RedisUnavailableError, ensure_redis
from service.server import run_server, server_config


def serve(
    host: Annotated[str | None, typer.Option(help="Bind address; default: settings")] = None,
    port: Annotated[
        int | None, typer.Option(min=0, max=65535, help="TCP port; default: settings")
    ] = None,
    workers: Annotated[
        int | None, typer.Option(min=1, help="Processes, each with its own model copy")
    ] = None,
    log_level: Annotated[str, typer.Option(help="uvicorn log level")] = "info",
) -> None:
    """Serve /encode, /similarity, /v1/embeddings, /documents, /search, /health, /ready, /info
    and /metrics. Starts a local redis-server for the documents when none answers."""
    settings = get_settings()
    with ExitStack() as stack:
        try:
            # Through Sentinel the master is wherever the sentinels say: no local server.
            redis_dir = None
            if not settings.redis_sentinels:
                redis_dir = stack.enter_context(
                    ensure_redis(
                        settings.redis_url, settings.var_dir / "redis", start=settings.start_redis
                    )
                )
        except RedisUnavailableError as error:
            typer.echo(f"error: {error}", err=True)
            raise typer.Exit(code=1) from None
        if redis_dir is not None:
            typer.echo(f"started redis-server at {settings.redis_url}, data in {redis_dir}")
        config = server_config(
            "service.app:app_from_environment",
            settings,
            factory=True,
            host=host if host is not None else settings.host,
            port=port if port is not None else settings.port,
            workers=workers if workers is not None else settings.workers,
            log_level=log_level,
        )
        run_server(config)
