"""/admin: retrain jobs and model versions, behind the admin token (not the API key).

POST /admin/retrain, GET /admin/jobs, GET and DELETE /admin/jobs/{id}, GET /admin/models,
POST /admin/models/{version}/activate, GET /admin/models/{version}/report (and its charts).
A request without a token, or with a wrong one, is a 401; without RANKSERVE_ADMIN_TOKEN
set, any token gets a 403. Handlers are plain functions: FastAPI runs
them in its thread pool, where RQ's synchronous Redis calls belong.
"""

import json
import logging
import pathlib
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Path, Request
from fastapi.responses import FileResponse
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer

from core.bundle_manifest import (
    REPORT_DIR,
    REPORT_JSON,
    VERSION_PATTERN,
    BundleError,
    BundleNotFoundError,
    BundleStoreUnavailableError,
    InvalidVersionError,
    ReportNotFoundError,
)
from core.jobs import (
    JobEndedError,
    JobNotFoundError,
    RetrainRequest,
    RetrainRequestError,
    cancel,
    describe,
    fetch,
    list_jobs,
    parse_request,
    reap_abandoned,
    submit,
)
from core.loading import settings_bundle
from core.settings import Settings
from core.threads import run_in_own_thread
from core.versions import activate, active_version, history
from service.auth import bearer_matches
from service.dependencies import SettingsDep
from service.errors import (
    ConflictError,
    ForbiddenError,
    InvalidRequestError,
    NotFoundError,
    NotReadyError,
    StoreDownError,
    UnauthorizedError,
    error_responses,
)
from service.json_route import StrictJSONRoute
from service.routes.admin_schemas import (
    ActivateResponse,
    CancelResponse,
    JobList,
    JobView,
    ModelsResponse,
    ModelVersion,
    ReportResponse,
    RetrainAccepted,
    RetrainBody,
)
from service.swap import Operations

logger = logging.getLogger(__name__)
admin_scheme = HTTPBearer(auto_error=False, description="RANKSERVE_ADMIN_TOKEN")
JOB_ID_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


async def require_admin(
    settings: SettingsDep,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(admin_scheme)],
) -> None:
    # A request without credentials is unauthenticated (401) whether or not admin is enabled;
    # 403 tells a caller who did present a token that no token can open this API.
    if credentials is None:
        raise UnauthorizedError("a valid admin token is required (Authorization: Bearer)")
    if settings.admin_token is None:
        raise ForbiddenError("the admin API is disabled: set RANKSERVE_ADMIN_TOKEN to enable it")
    if not bearer_matches(credentials, settings.admin_token):
        raise UnauthorizedError("a valid admin token is required (Authorization: Bearer)")


async def get_operations(request: Request) -> Operations:
    operations = getattr(request.app.state, "operations", None)
    if operations is None:
        raise NotReadyError("the admin API is not configured in this app")
    return operations


OperationsDep = Annotated[Operations, Depends(get_operations)]
JobId = Annotated[str, Path(pattern=JOB_ID_PATTERN, description="as returned by /admin/retrain")]
# The registry's rule, stated in the schema too: a name that cannot be one safe path component
# (traversal, absolute, hidden) is a 422 before any handler touches the store.
Version = Annotated[
    str, Path(pattern=f"^{VERSION_PATTERN.pattern}$", description="a bundle's version name")
]


def _stored_report(ops: Operations, version: str) -> tuple[dict[str, Any], pathlib.Path]:
    try:
        return ops.store.report(version)
    except InvalidVersionError as error:
        raise InvalidRequestError(str(error)) from None
    except BundleNotFoundError:
        raise NotFoundError(f"no bundle named {version!r}") from None
    except ReportNotFoundError:
        raise NotFoundError(f"bundle {version!r} has no diagnostics report") from None
    except BundleError as error:
        logger.warning("report of %s unreadable: %s", version, error)
        raise ConflictError(f"bundle {version!r} is unusable") from None


def admin_router() -> APIRouter:
    """A router under /admin behind the admin token, with the errors every admin route shares."""
    return APIRouter(
        prefix="/admin",
        tags=["admin"],
        route_class=StrictJSONRoute,
        dependencies=[Depends(require_admin)],
        responses=error_responses(UnauthorizedError, ForbiddenError, StoreDownError),
    )


def build_router(settings: Settings) -> APIRouter:
    router = admin_router()

    @router.post(
        "/retrain",
        status_code=202,
        response_model=RetrainAccepted,
        responses=error_responses(InvalidRequestError),
    )
    def retrain(body: RetrainBody, ops: OperationsDep) -> RetrainAccepted:
        """Queue a retrain job; the worker trains, gates, bundles and (maybe) promotes."""
        request = RetrainRequest(
            body.method.value,
            body.params,
            body.force,
            body.teachers,
            body.recipe.value,
            text=body.text,
            documents_share=body.documents_share,
        )
        try:
            parse_request(request, ops.settings)
        except RetrainRequestError as error:
            raise InvalidRequestError(str(error)) from None
        job = submit(ops.queue, request, ops.settings)
        return RetrainAccepted(job_id=job.id, status="queued")

    @router.get("/jobs", response_model=JobList)
    def jobs(ops: OperationsDep) -> JobList:
        """Every job RQ still remembers, newest first."""
        reap_abandoned(ops.queue)
        return JobList(jobs=[JobView(**describe(job)) for job in list_jobs(ops.queue)])

    @router.get("/jobs/{job_id}", response_model=JobView, responses=error_responses(NotFoundError))
    def job(job_id: JobId, ops: OperationsDep) -> JobView:
        """Status, progress, result (version, gate, metrics) or error of one job."""
        try:
            reap_abandoned(ops.queue)
            return JobView(**describe(fetch(ops.queue, job_id)))
        except JobNotFoundError:
            raise NotFoundError(f"no job {job_id}") from None

    @router.delete(
        "/jobs/{job_id}",
        response_model=CancelResponse,
        responses=error_responses(NotFoundError, ConflictError),
    )
    def cancel_job(job_id: JobId, ops: OperationsDep) -> CancelResponse:
        """Cancel a queued job, or stop a running one (its work horse is killed)."""
        try:
            status = cancel(ops.queue, fetch(ops.queue, job_id))
        except JobNotFoundError:
            raise NotFoundError(f"no job {job_id}") from None
        except JobEndedError as error:
            raise ConflictError(str(error)) from None
        return CancelResponse(id=job_id, status=status.value)

    @router.get("/models", response_model=ModelsResponse)
    def models(ops: OperationsDep) -> ModelsResponse:
        """Every bundle with its metrics, which one is active, what each replica serves."""
        active = active_version(ops.redis, ops.keys)
        refusals = {
            name.decode(): json.loads(value)
            for name, value in ops.redis.hgetall(ops.keys.refused_bundles).items()
        }
        replicas = {}
        for key in ops.redis.scan_iter(match=ops.keys.replica_pattern, count=100):
            value = ops.redis.get(key)
            if value is not None:
                replica = key.decode().removeprefix(ops.keys.replica(""))
                replicas[replica] = json.loads(value)
        activations = history(ops.redis, ops.keys)
        versions = []
        for version in ops.store.versions():
            try:
                manifest = ops.store.manifest(version)
            except BundleError:
                continue
            versions.append(
                ModelVersion(
                    version=version,
                    created_at=manifest.created_at,
                    method=manifest.method,
                    parent=manifest.parent,
                    name=manifest.encoder.name,
                    dim=manifest.encoder.dim,
                    corpus_revision=manifest.corpus.revision if manifest.corpus else None,
                    metrics=manifest.metrics,
                    active=version == active,
                    refused=refusals.get(version),
                    has_report=f"{REPORT_DIR}/{REPORT_JSON}" in manifest.files,
                )
            )
        return ModelsResponse(
            active=active,
            serving=ops.swap.serving,
            versions=versions,
            replicas=replicas,
            history=activations,
        )

    @router.post(
        "/models/{version:path}/activate",
        response_model=ActivateResponse,
        responses=error_responses(InvalidRequestError, NotFoundError, ConflictError),
    )
    def activate_version(version: Version, ops: OperationsDep) -> ActivateResponse:
        """Roll back or forward: load the bundle as a replica would (checksums, weights,
        dimension, a finite smoke encode), then make it the active one; an unloadable bundle
        is a 409 and the active version stays as it was.

        `version` is matched as a path so that names with slashes reach the validation (and
        its 422) instead of falling through to a 404.
        """
        try:
            ops.store.path_for(version)
        except InvalidVersionError as error:
            # Its messages name the version and the rule, never a path.
            raise InvalidRequestError(str(error)) from None
        try:
            # Not in this route's own thread, one of a pool that lives on (core/threads.py).
            run_in_own_thread(settings_bundle, ops.settings, ops.store, version)
        except BundleNotFoundError:
            raise NotFoundError(f"no bundle named {version!r}") from None
        except BundleStoreUnavailableError as error:
            logger.warning("activation of %s: the bundle store did not answer: %s", version, error)
            raise StoreDownError("the bundle store is unavailable; retry later") from None
        except BundleError as error:
            logger.warning("activation of %s refused: %s", version, error)
            raise ConflictError(f"bundle {version!r} does not load; it stays inactive") from None
        # An operator re-activating a version asks every replica to try it afresh.
        ops.redis.hdel(ops.keys.refused_bundles, version)
        previous = active_version(ops.redis, ops.keys)
        activate(ops.redis, ops.keys, version, reason="activated through the admin API")
        return ActivateResponse(active=version, previous=previous)

    @router.get(
        "/models/{version}/report",
        response_model=ReportResponse,
        responses=error_responses(InvalidRequestError, NotFoundError, ConflictError),
    )
    def report(version: Version, request: Request, ops: OperationsDep) -> ReportResponse:
        """The diagnostics the worker stored with this version, with links to its charts."""
        data, _ = _stored_report(ops, version)
        charts = {
            name: str(request.url_for("admin_report_chart", version=version, chart=file))
            for name, file in data.get("charts", {}).items()
        }
        return ReportResponse(version=version, report=data, charts=charts)

    @router.get(
        "/models/{version}/report/{chart}",
        name="admin_report_chart",
        response_class=FileResponse,
        responses={
            200: {"content": {"image/png": {}}, "description": "the chart"},
            **error_responses(InvalidRequestError, NotFoundError, ConflictError),
        },
    )
    def report_chart(
        version: Version,
        chart: Annotated[str, Path(pattern=r"^[a-z0-9-]{1,64}\.png$")],
        ops: OperationsDep,
    ) -> FileResponse:
        """One PNG chart of a version's report (only files the report names are served)."""
        data, folder = _stored_report(ops, version)
        if chart not in data.get("charts", {}).values():
            raise NotFoundError(f"the report of {version!r} has no chart {chart!r}")
        return FileResponse(folder / chart, media_type="image/png")

    return router
