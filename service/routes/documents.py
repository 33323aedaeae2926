"""The Document API: upsert, read, list and delete documents of the search corpus.

Writes are acknowledged once Redis has executed them (the corpus's source of truth), and
after this replica's index has applied them, so a search right after a write sees it.
"""

import uuid
from typing import Annotated

from fastapi import APIRouter, Path, Query
from pydantic import BaseModel, ConfigDict, Field
from starlette.convertors import StringConvertor, register_url_convertor

from core.documents import NewDocument, StoredDocument
from core.settings import Settings
from service.auth import data_router
from service.corpus.lifespan import CorpusDep
from service.corpus.schemas import (
    ID_PATTERN,
    ID_REGEX,
    RESERVED_ID,
    DeleteResponse,
    DocumentLimits,
    DocumentOut,
    DocumentPage,
    UpsertResponse,
    document_models,
)
from service.dependencies import EngineDep
from service.errors import (
    ENCODING_ROUTE_ERRORS,
    ErrorBody,
    InvalidRequestError,
    NotFoundError,
    NotReadyError,
    StoreDownError,
    error_responses,
)

MAX_PAGE = 1000


class DocumentIdConvertor(StringConvertor):
    """Only document ids match `/documents/{doc_id}`, so `/documents/delete` belongs to the
    batch route alone (and its 405s name POST only); anything else there is a 404."""

    regex = f"(?!{RESERVED_ID}$){ID_REGEX}"


register_url_convertor("document_id", DocumentIdConvertor())

PathId = Annotated[
    str,
    Path(
        pattern=ID_PATTERN,
        description="The document id",
        json_schema_extra={"not": {"const": RESERVED_ID}},
    ),
]


class ListQuery(BaseModel):
    # A misspelt parameter (`?limt=5`) is an error, as a misspelt body field is.
    model_config = ConfigDict(extra="forbid")

    cursor: str | None = Field(
        default=None, pattern=ID_PATTERN, description="`next_cursor` of the previous page"
    )
    limit: int = Field(default=100, ge=1, le=MAX_PAGE)


def document_out(doc: StoredDocument) -> DocumentOut:
    return DocumentOut(id=doc.id, text=doc.text, metadata=doc.metadata, revision=doc.revision)


def build_router(settings: Settings) -> APIRouter:
    models = document_models(DocumentLimits.from_settings(settings))
    router = data_router(settings, "documents")
    store_errors = error_responses(InvalidRequestError, NotReadyError, StoreDownError)
    by_id_errors = {
        **error_responses(NotFoundError, InvalidRequestError, StoreDownError),
        405: {"model": ErrorBody, "description": f"{RESERVED_ID!r} is the batch route's path"},
    }

    @router.post(
        "/documents",
        response_model=UpsertResponse,
        responses={**ENCODING_ROUTE_ERRORS, **store_errors},
    )
    async def upsert_documents(
        body: models.upsert, engine: EngineDep, corpus: CorpusDep
    ) -> UpsertResponse:
        """Insert or replace documents (an id is generated where none is given)."""
        documents = [
            NewDocument(doc.id or uuid.uuid4().hex, doc.text, doc.metadata)
            for doc in body.documents
        ]
        revision = await corpus.upsert(engine, documents)
        return UpsertResponse(ids=[doc.id for doc in documents], revision=revision)

    @router.get(
        "/documents",
        response_model=DocumentPage,
        responses=store_errors,
    )
    async def list_documents(
        corpus: CorpusDep, query: Annotated[ListQuery, Query()]
    ) -> DocumentPage:
        """Documents in id order, a page at a time."""
        documents, next_cursor = await corpus.store.list_page(query.cursor, query.limit)
        return DocumentPage(
            documents=[document_out(doc) for doc in documents], next_cursor=next_cursor
        )

    @router.get(
        "/documents/{doc_id:document_id}",
        response_model=DocumentOut,
        responses=by_id_errors,
    )
    async def get_document(doc_id: PathId, corpus: CorpusDep) -> DocumentOut:
        doc = await corpus.store.get(doc_id)
        if doc is None:
            raise NotFoundError(f"no document with id {doc_id!r}")
        return document_out(doc)

    @router.delete(
        "/documents/{doc_id:document_id}",
        response_model=DeleteResponse,
        responses=by_id_errors,
    )
    async def delete_document(doc_id: PathId, corpus: CorpusDep) -> DeleteResponse:
        (existed,), revision = await corpus.delete([doc_id])
        if not existed:
            raise NotFoundError(f"no document with id {doc_id!r}")
        return DeleteResponse(deleted=[doc_id], not_found=[], revision=revision)

    @router.post(
        "/documents/delete",
        response_model=DeleteResponse,
        responses=store_errors,
    )
    async def delete_documents(body: models.delete, corpus: CorpusDep) -> DeleteResponse:
        """Delete several documents; ids that do not exist are listed, not an error."""
        existed, revision = await corpus.delete(body.ids)
        return DeleteResponse(
            deleted=[i for i, hit in zip(body.ids, existed, strict=True) if hit],
            not_found=[i for i, hit in zip(body.ids, existed, strict=True) if not hit],
            revision=revision,
        )

    return router
