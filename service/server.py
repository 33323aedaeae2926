"""The HTTP server that `rankserve serve` runs, and the API tests too: uvicorn with the hardened
protocol of service/http_protocol.py and the request-id log format, configured in one place
(`server_config`)."""

import contextlib
import copy
import sys
from dataclasses import asdict
from typing import Any

import uvicorn
from uvicorn.config import LOGGING_CONFIG
from uvicorn.supervisors import Multiprocess

from core.settings import Settings
from service.http_protocol import LIMITS_ATTRIBUTE, HardenedHttpProtocol
from service.limits import ServerLimits
from service.metrics import forget_dead_workers, multiprocess_directory

# uvicorn's exit status when the server did not start (uvicorn.main.STARTUP_FAILURE).
_STARTUP_FAILURE = 3


def log_config(level: str) -> dict[str, Any]:
    """uvicorn's logging, plus the service's own loggers, with each line's request id."""
    config = copy.deepcopy(LOGGING_CONFIG)
    config["filters"] = {"request_id": {"()": "service.request_id.RequestIdFilter"}}
    for handler in config["handlers"].values():
        handler["filters"] = ["request_id"]
    access = config["formatters"]["access"]
    access["fmt"] = f"{access['fmt']} request=%(request_id)s"
    config["formatters"]["rankserve"] = {
        "()": "uvicorn.logging.DefaultFormatter",
        "fmt": "%(levelprefix)s %(name)s: %(message)s [request=%(request_id)s]",
    }
    config["handlers"]["rankserve"] = {
        "formatter": "rankserve",
        "class": "logging.StreamHandler",
        "stream": "ext://sys.stderr",
        "filters": ["request_id"],
    }
    for name in ("service", "core", "models"):
        config["loggers"][name] = {"handlers": ["rankserve"], "level": level.upper()}
    return config


def server_config(app: Any, settings: Settings, **options: Any) -> uvicorn.Config:
    """The one uvicorn configuration, for `rankserve serve` and the tests' servers alike.

    `app` is an ASGI app, or an import string (with `factory=True`) when `workers` > 1;
    `options` are uvicorn's (host, port, workers, log_level, ...).
    """
    level = str(options.pop("log_level", "info"))
    config = uvicorn.Config(
        app,
        # Names, not objects: with several workers the config is pickled into each process,
        # which must answer the supervisor's health checks (within 5 s) before it imports
        # this module, the app and torch; uvicorn imports the protocol after that.
        http=f"{HardenedHttpProtocol.__module__}:{HardenedHttpProtocol.__name__}",
        # A spawned worker imports the CLI and torch before its first health check; on two
        # busy cores that took longer than uvicorn's 5 s default and workers were restarted
        # in a loop.
        timeout_worker_healthcheck=60,
        log_config=log_config(level),
        log_level=level,
        **options,
    )
    setattr(config, LIMITS_ATTRIBUTE, asdict(ServerLimits.from_settings(settings)))
    return config


class MetricsSupervisor(Multiprocess):
    """uvicorn's supervisor, which also marks every worker that exited dead for Prometheus
    (service/metrics.py), each time it has checked on, restarted or stopped its workers."""

    def _forget_dead(self) -> None:
        forget_dead_workers([p.pid for p in self.processes if p.pid and p.exitcode is None])

    def keep_subprocess_alive(self) -> None:
        super().keep_subprocess_alive()
        self._forget_dead()

    def restart_all(self) -> None:
        super().restart_all()
        self._forget_dead()

    def handle_ttou(self) -> None:
        super().handle_ttou()
        self._forget_dead()

    def join_all(self) -> None:
        super().join_all()
        self._forget_dead()


def run_server(config: uvicorn.Config) -> None:
    """What `uvicorn.run` does with the Config it builds: one process, or a supervisor over
    `config.workers` processes sharing one socket (each loads the app itself), whose metrics
    go through one fresh Prometheus multiprocess directory."""
    if config.workers > 1:
        if not isinstance(config.app, str):
            raise ValueError("several workers need the app as an import string")
        with multiprocess_directory():
            MetricsSupervisor(config, sockets=[config.bind_socket()]).run()
        return
    server = uvicorn.Server(config)
    with contextlib.suppress(KeyboardInterrupt):  # as uvicorn.run: Ctrl-C is a normal stop
        server.run()
    if not server.started:
        sys.exit(_STARTUP_FAILURE)
