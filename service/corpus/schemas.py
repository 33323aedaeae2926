"""Request and response bodies of /documents and /search.

As in service/schemas.py, the limits are part of each request model's JSON schema, so the
OpenAPI document states what is accepted; models are built per `DocumentLimits` (cached).
"""

import json
from dataclasses import dataclass
from functools import cache
from typing import Annotated

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    Tag,
)

from core.settings import Settings
from service.corpus.filters import (
    SAFE_INT,
    QdrantFilter,
    filter_field_schema,
    filter_kind,
    json_integer,
)
from service.schemas import LambdaField

# A safe set for URL paths and Redis keys; the first character excludes "." and ".." ids.
ID_REGEX = r"[A-Za-z0-9][A-Za-z0-9_.:@-]{0,127}"
ID_PATTERN = f"^{ID_REGEX}$"
# /documents/delete is the batch-delete route, so "delete" cannot name a document.
RESERVED_ID = "delete"
METADATA_KEY_PATTERN = r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}$"


def _not_reserved(doc_id: str) -> str:
    if doc_id == RESERVED_ID:
        raise ValueError(f"{RESERVED_ID!r} is reserved and cannot be a document id")
    return doc_id


DocumentId = Annotated[
    str,
    Field(
        pattern=ID_PATTERN,
        description=f"1-128 characters: letters, digits, _.:@-; not {RESERVED_ID!r}",
        json_schema_extra={"not": {"const": RESERVED_ID}},
    ),
    AfterValidator(_not_reserved),
]
MetadataKey = Annotated[str, Field(pattern=METADATA_KEY_PATTERN)]
MetadataScalar = (
    StrictBool
    | Annotated[StrictInt, Field(ge=-SAFE_INT, le=SAFE_INT)]
    | Annotated[StrictFloat, Field(allow_inf_nan=False)]
    | Annotated[StrictStr, Field(max_length=256)]
    | None
)
MAX_METADATA_ARRAY = 64  # elements of one array value (Qdrant's multi-valued payload)
MetadataValue = (
    MetadataScalar | Annotated[list[MetadataScalar], Field(max_length=MAX_METADATA_ARRAY)]
)


JsonInt = Annotated[int, BeforeValidator(json_integer)]


@dataclass(frozen=True)
class DocumentLimits:
    max_documents_per_request: int
    max_text_chars: int
    max_metadata_keys: int
    max_metadata_bytes: int
    max_top_k: int
    max_search_candidates: int
    max_search_offset: int
    default_candidates: int

    @classmethod
    def from_settings(cls, settings: Settings) -> "DocumentLimits":
        return cls(
            max_documents_per_request=settings.max_documents_per_request,
            max_text_chars=settings.max_text_chars,
            max_metadata_keys=settings.max_metadata_keys,
            max_metadata_bytes=settings.max_metadata_bytes,
            max_top_k=settings.max_top_k,
            max_search_candidates=settings.max_search_candidates,
            max_search_offset=settings.max_search_offset,
            default_candidates=min(settings.search_candidates, settings.max_search_candidates),
        )


def compact_json_size(value: object) -> int:
    """Bytes of the compact UTF-8 JSON form, the form the store keeps."""
    return len(json.dumps(value, separators=(",", ":"), ensure_ascii=False).encode())


class _Request(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True)


@dataclass(frozen=True)
class DocumentModels:
    document: type[BaseModel]
    upsert: type[_Request]
    delete: type[_Request]
    search: type[_Request]


def _unique(ids: list[str]) -> list[str]:
    if len(set(ids)) != len(ids):
        raise ValueError("ids must be unique within one request")
    return ids


@cache
def document_models(limits: DocumentLimits) -> DocumentModels:
    def bounded(metadata: dict[str, object]) -> dict[str, object]:
        if compact_json_size(metadata) > limits.max_metadata_bytes:
            raise ValueError(f"metadata is larger than {limits.max_metadata_bytes} bytes as JSON")
        return metadata

    metadata_type = Annotated[
        dict[MetadataKey, MetadataValue],
        Field(
            max_length=limits.max_metadata_keys,
            description=(
                "A flat JSON object: string, number, boolean or null values, or arrays of "
                f"them (up to {MAX_METADATA_ARRAY}), at most {limits.max_metadata_bytes} bytes "
                "as compact JSON"
            ),
            # pydantic states the key pattern as patternProperties; without this, any other
            # key would still look valid to a client reading the schema.
            json_schema_extra={"additionalProperties": False},
        ),
        AfterValidator(bounded),
    ]
    equality_type = Annotated[
        dict[MetadataKey, MetadataScalar],
        Field(
            max_length=limits.max_metadata_keys,
            description="Earlier versions' filter: every key given holds its value",
            json_schema_extra={"additionalProperties": False},
        ),
    ]
    filter_type = Annotated[
        Annotated[QdrantFilter, Tag("qdrant-filter")]
        | Annotated[equality_type, Tag("equality-filter")],
        Discriminator(filter_kind),
    ]
    text_type = Annotated[str, Field(min_length=1, max_length=limits.max_text_chars)]

    class DocumentIn(_Request):
        id: DocumentId | None = Field(default=None, description="Generated when absent")
        text: text_type
        metadata: metadata_type = Field(default_factory=dict)

    class UpsertRequest(_Request):
        documents: Annotated[
            list[DocumentIn],
            Field(
                min_length=1,
                max_length=limits.max_documents_per_request,
                description="Written in order: of two with the same id, the later one stays",
            ),
        ]

    class DeleteRequest(_Request):
        ids: Annotated[
            list[DocumentId],
            Field(
                min_length=1,
                max_length=limits.max_documents_per_request,
                json_schema_extra={"uniqueItems": True},
            ),
            AfterValidator(_unique),
        ]

    class SearchRequest(_Request):
        query: text_type
        top_k: JsonInt = Field(default=10, ge=1, le=limits.max_top_k)
        candidates: JsonInt = Field(
            default=limits.default_candidates,
            ge=1,
            le=limits.max_search_candidates,
            description="Documents faiss proposes for Eq. 7 rescoring (at least top_k are)",
        )
        offset: JsonInt = Field(
            default=0,
            ge=0,
            le=limits.max_search_offset,
            description="Hits skipped before the top_k returned: pages of one ranking",
        )
        lambda_: LambdaField = None
        filter: filter_type | None = Field(
            default=None,
            description=(
                "Qdrant's filter (must/should/must_not of match, range, is_null, is_empty "
                "conditions, nestable), or a flat object of metadata values to equal"
            ),
            json_schema_extra=filter_field_schema,
        )

    return DocumentModels(
        document=DocumentIn, upsert=UpsertRequest, delete=DeleteRequest, search=SearchRequest
    )


class DocumentOut(BaseModel):
    id: str
    text: str
    metadata: dict[str, MetadataValue]
    revision: int = Field(description="Corpus revision of the document's last write")


class UpsertResponse(BaseModel):
    ids: list[str] = Field(description="In request order, generated ones included")
    revision: int = Field(description="Corpus revision after the write")


class DeleteResponse(BaseModel):
    deleted: list[str]
    not_found: list[str]
    revision: int


class DocumentPage(BaseModel):
    documents: list[DocumentOut]
    next_cursor: str | None = Field(description="Pass as `cursor` for the next page; null at end")


class SearchHit(BaseModel):
    id: str
    text: str
    metadata: dict[str, MetadataValue]
    score: float = Field(description="Eq. 7: lambda * rank + (1 - lambda) * cosine")
    cosine: float
    rank: float = Field(description="Spearman correlation of the two anchor-rank profiles")


class SearchResponse(BaseModel):
    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True)

    hits: list[SearchHit]
    lambda_: float = Field(alias="lambda")
    model_version: str
    revision: int = Field(description="Corpus revision this replica's index had applied")
