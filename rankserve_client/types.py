"""The JSON bodies of the service's responses, as TypedDicts (docs/api.md has every field).

They type what the service sends and check nothing at run time: a field the service adds later
reaches the caller unchanged. Keys that are Python keywords (`lambda`) use the functional form.
"""

from typing import Any, Literal, NotRequired, TypedDict

MetadataScalar = str | int | float | bool | None
MetadataValue = MetadataScalar | list[MetadataScalar]


class Document(TypedDict):
    """A document to upsert; without an id, the service generates one."""

    text: str
    id: NotRequired[str]
    metadata: NotRequired[dict[str, MetadataValue]]


class EncodeResult(TypedDict):
    embeddings: list[list[float]]
    dim: int
    model_version: str
    truncated: list[bool]


class EmbeddingItem(TypedDict):
    object: Literal["embedding"]
    index: int
    embedding: list[float] | str  # a base64 string with encoding_format="base64"
    truncated: bool


class Usage(TypedDict):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResult(TypedDict):
    object: Literal["list"]
    data: list[EmbeddingItem]
    model: str
    usage: Usage
    model_version: str


class SimilarityScore(TypedDict):
    score: float  # Eq. 7
    cosine: float
    rank: float
    truncated: bool


SimilarityResult = TypedDict(
    "SimilarityResult",
    {"scores": list[SimilarityScore], "lambda": float, "model_version": str},
)


class NearestAnchor(TypedDict):
    anchor: int  # index in the serving anchor set
    text: str
    cosine: float


class ExplainedSource(TypedDict):
    nearest_anchors: list[NearestAnchor]  # highest cosine first


class ExplainedTarget(SimilarityScore):
    nearest_anchors: list[NearestAnchor]
    shared_anchors: int  # how many of them are among the source's nearest


ExplainResult = TypedDict(
    "ExplainResult",
    {
        "source": ExplainedSource,
        "targets": list[ExplainedTarget],
        "lambda": float,
        "anchor_count": int,
        "model_version": str,
    },
)


class RerankDocument(TypedDict):
    text: str


class RerankItem(TypedDict):
    index: int  # position in the documents sent
    relevance_score: float  # Eq. 7
    cosine: float
    rank: float
    truncated: bool
    document: NotRequired[RerankDocument]  # with return_documents=True


RerankResult = TypedDict(
    "RerankResult",
    {
        "id": str,
        "results": list[RerankItem],
        "model": str,
        "lambda": float,
        "model_version": str,
    },
)


class StoredDocument(TypedDict):
    id: str
    text: str
    metadata: dict[str, MetadataValue]
    revision: int


class UpsertResult(TypedDict):
    ids: list[str]
    revision: int


class DeleteResult(TypedDict):
    deleted: list[str]
    not_found: list[str]
    revision: int


class DocumentPage(TypedDict):
    documents: list[StoredDocument]
    next_cursor: str | None


class SearchHit(TypedDict):
    id: str
    text: str
    metadata: dict[str, MetadataValue]
    score: float  # Eq. 7
    cosine: float
    rank: float


SearchResult = TypedDict(
    "SearchResult",
    {"hits": list[SearchHit], "lambda": float, "model_version": str, "revision": int},
)


class Health(TypedDict):
    status: Literal["ok"]


class Ready(TypedDict):
    status: Literal["ready"]
    model_version: str


class Info(TypedDict):
    model_name: str
    model_version: str
    dim: int
    device: str
    encoder_backend: str  # what runs the encoder: the setting, or what `auto` chose
    anchor_count: int
    lambda_inf: float
    limits: dict[str, Any]  # every request limit; GET /info in docs/api.md lists them


class RetrainAccepted(TypedDict):
    job_id: str
    status: str


class Job(TypedDict):
    id: str
    status: str
    method: str | None
    force: bool
    params: dict[str, Any]
    teachers: list[str]
    recipe: str
    text: str
    documents_share: float | None
    enqueued_at: str | None
    started_at: str | None
    ended_at: str | None
    retries_left: int | None
    worker: str | None
    progress: dict[str, Any]
    result: dict[str, Any] | None
    error: str | None


class JobList(TypedDict):
    jobs: list[Job]


class CancelResult(TypedDict):
    id: str
    status: str


class ModelVersion(TypedDict):
    version: str
    created_at: str
    method: str | None
    parent: str | None
    name: str
    dim: int
    corpus_revision: int | None
    metrics: dict[str, Any]
    active: bool
    refused: dict[str, Any] | None
    has_report: bool


class Models(TypedDict):
    active: str | None
    serving: str | None
    versions: list[ModelVersion]
    replicas: dict[str, dict[str, Any]]
    history: list[dict[str, Any]]


class ActivateResult(TypedDict):
    active: str
    previous: str | None


class Report(TypedDict):
    version: str
    report: dict[str, Any]
    charts: dict[str, str]  # chart name -> URL of its PNG


class Snapshot(TypedDict):
    name: str
    created_at: str
    revision: int  # the corpus revision every document is as of
    count: int
    model_version: str | None  # active at that revision; None = the settings model
    bytes: int


class SnapshotList(TypedDict):
    snapshots: list[Snapshot]  # oldest first


class RestoreResult(TypedDict):
    snapshot: Snapshot
    upserted: int
    deleted: int
    revision: int  # the corpus revision right after the restore
    indexed: bool  # whether the answering replica had indexed it
