"""Request and response bodies.

Request models carry the limits in their JSON schema (maxItems, maxLength), so the OpenAPI
document tells clients (and schemathesis) exactly what is accepted. Limits come from the
settings, so request models are built per `Limits` by `request_models` (cached).
"""

from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Discriminator, Field, Tag
from pydantic_core import PydanticCustomError

from service.limits import Limits


class _Request(BaseModel):
    # A misspelt field is an error, not a silently ignored option; strict, so that a JSON
    # value of the wrong type (false or "0.5" for a number) is refused, as the schema says.
    model_config = ConfigDict(
        extra="forbid", strict=True, validate_by_name=True, validate_by_alias=True
    )


LambdaField = Annotated[
    float | None,
    Field(
        alias="lambda",
        ge=0.0,
        le=1.0,
        allow_inf_nan=False,
        # JSON numbers only: lax mode would take `true` as 1.0 and "0.5" as 0.5.
        strict=True,
        description="Eq. 7 weight of the rank similarity; default: the server's lambda_inf",
    ),
]


def _input_shape(value: Any) -> str:
    return "one-text" if isinstance(value, str) else "text-list"


TOKEN_IDS_MESSAGE = (
    "token ids are not accepted, only strings: this model's tokenizer is not OpenAI's, so "
    "the ids would stand for other words here. LangChain's OpenAIEmbeddings sends ids unless "
    "it is built with check_embedding_ctx_length=False"
)


def _is_token_id(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _refuse_token_ids(value: Any) -> Any:
    """OpenAI's `input` may be token ids (a list of ints, or of int lists), which LangChain
    sends by default: named as such, so the caller learns the setting to flip instead of
    reading "Input should be a valid string" once per id. Not in the schema: never valid."""
    if (
        isinstance(value, list)
        and value
        and (
            all(_is_token_id(item) for item in value)
            or all(isinstance(item, list) and all(map(_is_token_id, item)) for item in value)
        )
    ):
        raise PydanticCustomError("token_ids", TOKEN_IDS_MESSAGE)
    return value


def _similarity_form(value: Any) -> str:
    return "pairs-form" if isinstance(value, dict) and "pairs" in value else "source-form"


@dataclass(frozen=True)
class RequestModels:
    encode: type[_Request]
    similarity_pairs: type[_Request]
    similarity_targets: type[_Request]
    # Either similarity model, chosen by the body's shape so errors speak of that form only.
    similarity: Any
    embeddings: type[_Request]


@cache
def request_models(limits: Limits) -> RequestModels:
    """The request bodies under these limits: one set per distinct `Limits`."""
    text_type = Annotated[str, Field(max_length=limits.max_text_chars)]
    texts_type = Annotated[
        list[text_type], Field(min_length=1, max_length=limits.max_texts_per_request)
    ]
    # A list of exactly two, not a tuple: strict validation of parsed JSON takes no list as tuple.
    pair_type = Annotated[list[text_type], Field(min_length=2, max_length=2)]
    pairs_type = Annotated[
        list[pair_type],
        Field(min_length=1, max_length=limits.max_similarity_pairs),
    ]
    targets_type = Annotated[
        list[text_type], Field(min_length=1, max_length=limits.max_similarity_targets)
    ]

    class EncodeRequest(_Request):
        texts: texts_type
        normalize: Literal[True] = Field(
            default=True,
            description="Embeddings are always unit vectors: rank vectors and Eq. 7 need them",
        )

    class SimilarityPairsRequest(_Request):
        pairs: pairs_type
        lambda_: LambdaField = None

    class SimilarityTargetsRequest(_Request):
        source: text_type
        targets: targets_type
        lambda_: LambdaField = None

    class EmbeddingsRequest(_Request):
        """OpenAI's embeddings request; token-id inputs and `dimensions` are not supported."""

        # Validated as the shape the caller sent, so errors are not doubled by the other branch.
        input: Annotated[
            Annotated[
                Annotated[text_type, Tag("one-text")] | Annotated[texts_type, Tag("text-list")],
                Discriminator(_input_shape),
            ],
            BeforeValidator(_refuse_token_ids),
        ]
        model: Annotated[str | None, Field(max_length=256)] = None
        encoding_format: Literal["float", "base64"] = "float"
        user: Annotated[str | None, Field(max_length=256)] = None

    return RequestModels(
        encode=EncodeRequest,
        similarity_pairs=SimilarityPairsRequest,
        similarity_targets=SimilarityTargetsRequest,
        similarity=Annotated[
            Annotated[SimilarityPairsRequest, Tag("pairs-form")]
            | Annotated[SimilarityTargetsRequest, Tag("source-form")],
            Discriminator(_similarity_form),
        ],
        embeddings=EmbeddingsRequest,
    )


class EncodeResponse(BaseModel):
    embeddings: list[list[float]]
    dim: int
    model_version: str
    truncated: list[bool] = Field(
        description="Per text: it had more tokens than the model reads, the rest were cut"
    )


class SimilarityScore(BaseModel):
    score: float = Field(description="Eq. 7: lambda * rank + (1 - lambda) * cosine")
    cosine: float
    rank: float = Field(description="Spearman correlation of the two anchor-rank profiles")
    truncated: bool


class SimilarityResponse(BaseModel):
    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True)

    scores: list[SimilarityScore]
    lambda_: float = Field(alias="lambda")
    model_version: str


class EmbeddingItem(BaseModel):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str = Field(description="floats, or base64 little-endian float32")
    truncated: bool


class Usage(BaseModel):
    prompt_tokens: int
    total_tokens: int


class EmbeddingsResponse(BaseModel):
    object: Literal["list"] = "list"
    data: list[EmbeddingItem]
    model: str
    usage: Usage
    model_version: str


class HealthResponse(BaseModel):
    status: Literal["ok"] = "ok"


class ReadyResponse(BaseModel):
    status: Literal["ready"] = "ready"
    model_version: str


class LimitsInfo(BaseModel):
    max_texts_per_request: int
    max_text_chars: int
    max_body_bytes: int
    max_tokens_per_text: int = Field(description="Tokens past this are truncated")
    max_similarity_pairs: int
    max_similarity_targets: int
    max_rerank_texts: int = Field(description="texts or documents per /rerank request")
    max_top_k: int = Field(description="/search hits per request")
    max_search_candidates: int = Field(description="/search candidates for Eq. 7 rescoring")
    max_search_offset: int = Field(description="/search hits skipped before a page")
    queue_capacity_texts: int
    max_batch_size: int
    max_batch_tokens: int = Field(
        description="Tokens per forward pass of the encoder: padding included, unless it packs"
    )
    batch_wait_ms: float
    batch_rejoin_ms: float = Field(
        description="How long at most a batch's clients are waited for to send their next texts"
    )
    max_json_depth: int = Field(description="Arrays and objects nested deeper are a 422")
    max_header_bytes: int = Field(description="Request line plus headers; more is a 431")
    max_headers: int = Field(description="Header fields per request; more is a 431")
    header_timeout_s: float = Field(
        description="From a request's first byte to its last header; then 408 and closed"
    )
    body_timeout_s: float = Field(
        description="From the last header to the body's last byte; then 408 and closed"
    )
    keep_alive_timeout_s: float = Field(
        description="A connection with no request in progress is closed after this"
    )


class InfoResponse(BaseModel):
    model_name: str
    model_version: str
    dim: int
    device: str
    encoder_backend: str = Field(
        description="What runs the encoder: RANKSERVE_ENCODER_BACKEND, or what `auto` chose"
    )
    anchor_count: int
    lambda_inf: float
    limits: LimitsInfo
