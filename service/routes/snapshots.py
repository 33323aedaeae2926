"""/admin/snapshots: corpus snapshots in the bundle store, and restores, behind the admin token.

POST /admin/snapshots writes one: every document as of one corpus revision, and the model
version active at that revision (core/snapshot_actions.py). GET /admin/snapshots lists them,
oldest first. POST /admin/snapshots/{name}/restore makes the corpus the snapshot's documents
in one atomic switch whose writes every replica follows through the change log; a restore
that dies midway changes nothing (core/corpus_restore.py). It answers once this replica has
indexed the restored corpus, or the write-visibility timeout passed (`indexed` says which).
"""

import asyncio
import logging
from typing import Annotated

from fastapi import APIRouter, Path
from pydantic import BaseModel, ConfigDict, Field

from core.bundle_manifest import BundleStoreUnavailableError
from core.corpus_files import CorpusFileError
from core.corpus_restore import RestoreBusyError, RestoreLockLostError
from core.documents import ChangeLogGapError
from core.settings import Settings
from core.snapshot_actions import create_snapshot, default_name, restore_snapshot
from core.snapshots import (
    NAME_PATTERN,
    CorruptSnapshotError,
    SnapshotExistsError,
    SnapshotManifest,
    SnapshotNotFoundError,
    snapshots_of,
)
from service.corpus.lifespan import CorpusDep
from service.errors import (
    ConflictError,
    InvalidRequestError,
    NotFoundError,
    NotReadyError,
    StoreDownError,
    error_responses,
)
from service.routes.admin import OperationsDep, admin_router

logger = logging.getLogger(__name__)

_NAME = f"^{NAME_PATTERN.pattern}$"
_NAME_RULE = "1-100 letters, digits, '.', '-', '_', starting with a letter or digit"
SnapshotName = Annotated[str, Path(pattern=_NAME, description=f"a snapshot's name: {_NAME_RULE}")]
_STORE_DOWN = "the bundle store is unavailable; retry later"


class SnapshotBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str | None = Field(
        default=None,
        pattern=_NAME,
        description=f"{_NAME_RULE}; default snapshot-<UTC time>",
    )


class SnapshotView(BaseModel):
    name: str
    created_at: str
    revision: int = Field(description="the corpus revision every document is as of")
    count: int = Field(description="documents in the snapshot")
    model_version: str | None = Field(
        description="the active model version at that revision; null = the settings model"
    )
    bytes: int = Field(description="size of its compressed documents file")


class SnapshotList(BaseModel):
    snapshots: list[SnapshotView]  # oldest first


class RestoreResponse(BaseModel):
    snapshot: SnapshotView
    upserted: int = Field(description="documents written because absent or different")
    deleted: int = Field(description="documents removed because the snapshot lacks them")
    revision: int = Field(description="the corpus revision right after the restore")
    indexed: bool = Field(
        description="whether this replica's index had applied the restore when it answered"
    )


def _view(manifest: SnapshotManifest) -> SnapshotView:
    return SnapshotView(
        name=manifest.name,
        created_at=manifest.created_at,
        revision=manifest.revision,
        count=manifest.count,
        model_version=manifest.model_version,
        bytes=manifest.documents_bytes,
    )


def build_router(settings: Settings) -> APIRouter:
    router = admin_router()

    @router.post(
        "/snapshots",
        status_code=201,
        response_model=SnapshotView,
        responses=error_responses(InvalidRequestError, ConflictError, NotReadyError),
    )
    async def take_snapshot(
        ops: OperationsDep, corpus: CorpusDep, body: SnapshotBody | None = None
    ) -> SnapshotView:
        """Write every document as of one corpus revision, with the active model version,
        into the bundle store; a name already taken is a 409."""
        name = (body.name if body is not None else None) or default_name()
        try:
            manifest = await create_snapshot(
                corpus.store, snapshots_of(ops.store), name, changes_keep=ops.settings.changes_keep
            )
        except SnapshotExistsError:
            raise ConflictError(f"a snapshot named {name!r} already exists") from None
        except ChangeLogGapError:
            raise ConflictError("the corpus changed faster than it could be read; retry") from None
        except BundleStoreUnavailableError as error:
            logger.warning("snapshot %s: the bundle store did not answer: %s", name, error)
            raise StoreDownError(_STORE_DOWN) from None
        logger.info(
            "snapshot %s: %d documents at revision %d", name, manifest.count, manifest.revision
        )
        return _view(manifest)

    @router.get("/snapshots", response_model=SnapshotList)
    async def list_snapshots(ops: OperationsDep) -> SnapshotList:
        """Every snapshot in the bundle store, oldest first."""
        try:
            manifests = await asyncio.to_thread(snapshots_of(ops.store).manifests)
        except BundleStoreUnavailableError as error:
            logger.warning("listing snapshots: the bundle store did not answer: %s", error)
            raise StoreDownError(_STORE_DOWN) from None
        return SnapshotList(snapshots=[_view(manifest) for manifest in manifests])

    @router.post(
        "/snapshots/{name:path}/restore",
        response_model=RestoreResponse,
        responses=error_responses(InvalidRequestError, NotFoundError, ConflictError, NotReadyError),
    )
    async def restore(name: SnapshotName, ops: OperationsDep, corpus: CorpusDep) -> RestoreResponse:
        """Make the corpus the snapshot's documents, atomically, for every replica: only the
        documents that differ are written (re-restoring changes nothing). One restore at a
        time; the active model version is left as it is (the answer names the snapshot's).

        `name` is matched as a path so that a name with a slash gets the 422 of the rule.
        """
        try:
            manifest, result = await restore_snapshot(
                corpus.store, snapshots_of(ops.store), name, changes_keep=ops.settings.changes_keep
            )
        except SnapshotNotFoundError:
            raise NotFoundError(f"no snapshot named {name!r}") from None
        except (CorruptSnapshotError, CorpusFileError) as error:
            logger.warning("restore of %s refused: %s", name, error)
            raise ConflictError(
                f"snapshot {name!r} is unusable; the corpus was not changed"
            ) from None
        except RestoreBusyError:
            raise ConflictError("another restore is running; the corpus was not changed") from None
        except (RestoreLockLostError, ChangeLogGapError) as error:
            logger.warning("restore of %s abandoned: %s", name, error)
            raise ConflictError(
                "the restore was interrupted; the corpus was not changed, retry"
            ) from None
        except BundleStoreUnavailableError as error:
            logger.warning("restore of %s: the bundle store did not answer: %s", name, error)
            raise StoreDownError(_STORE_DOWN) from None
        indexed = await corpus.follower.wait_applied(result.revision)
        logger.info(
            "restored snapshot %s: %d upserted, %d deleted, revision %d",
            name,
            result.upserted,
            result.deleted,
            result.revision,
        )
        return RestoreResponse(
            snapshot=_view(manifest),
            upserted=result.upserted,
            deleted=result.deleted,
            revision=result.revision,
            indexed=indexed,
        )

    return router
