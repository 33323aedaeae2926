"""Request and response bodies of POST /similarity/explain (service/routes/similarity.py)."""

from functools import cache
from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

from service.corpus.schemas import JsonInt
from service.limits import Limits
from service.schemas import LambdaField, SimilarityScore

# An explanation is read by a person: a handful of targets, a handful of anchors each.
MAX_EXPLAIN_TARGETS = 32
MAX_EXPLAIN_ANCHORS = 20
DEFAULT_EXPLAIN_ANCHORS = 5


@cache
def explain_request_model(limits: Limits) -> type[BaseModel]:
    """The request body under these limits (one model per distinct `Limits`)."""
    text_type = Annotated[str, Field(max_length=limits.max_text_chars)]

    class ExplainRequest(BaseModel):
        # As service/schemas.py's requests: unknown fields and wrong JSON types are refused.
        model_config = ConfigDict(
            extra="forbid", strict=True, validate_by_name=True, validate_by_alias=True
        )

        source: text_type
        targets: Annotated[
            list[text_type],
            Field(min_length=1, max_length=min(MAX_EXPLAIN_TARGETS, limits.max_similarity_targets)),
        ]
        lambda_: LambdaField = None
        anchors: JsonInt = Field(
            default=DEFAULT_EXPLAIN_ANCHORS,
            ge=1,
            le=MAX_EXPLAIN_ANCHORS,
            description="Nearest anchors listed per text (fewer when the anchor set is smaller)",
        )

    return ExplainRequest


class NearestAnchor(BaseModel):
    anchor: int = Field(description="Index of the anchor in the serving anchor set")
    text: str
    cosine: float = Field(description="Cosine of the text to this anchor")


class ExplainedSource(BaseModel):
    nearest_anchors: list[NearestAnchor] = Field(description="Highest cosine first")


class ExplainedTarget(SimilarityScore):
    nearest_anchors: list[NearestAnchor] = Field(description="Highest cosine first")
    shared_anchors: int = Field(description="How many of them are among the source's nearest")


class ExplainResponse(BaseModel):
    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True)

    source: ExplainedSource
    targets: list[ExplainedTarget] = Field(description="In request order")
    lambda_: float = Field(alias="lambda")
    anchor_count: int = Field(description="Anchors each rank vector ranks")
    model_version: str
