"""Request and response bodies of POST /rerank (service/routes/rerank.py).

Two request forms share the route, told apart by the list's name: `texts` is Hugging Face TEI's
form (answered with TEI's bare list), `documents` is Cohere's (answered with Cohere's
`{"results": [...]}`); Jina and most RAG frameworks speak one of the two. As in
service/schemas.py, the limits are in each model's JSON schema and the models are built per
`Limits` (cached).
"""

from dataclasses import dataclass
from functools import cache
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Discriminator, Field, Tag

from service.corpus.schemas import JsonInt
from service.limits import Limits
from service.schemas import LambdaField

TEI_FORM = "tei-form"
COHERE_FORM = "cohere-form"


class _Request(BaseModel):
    # As every request of service/schemas.py: a misspelt field is an error, and a JSON value
    # of the wrong type (the string "true" for a flag) is refused, as the schema says.
    model_config = ConfigDict(
        extra="forbid", strict=True, validate_by_name=True, validate_by_alias=True
    )


def rerank_form(value: Any) -> str:
    """`texts` means TEI; anything else is read as Cohere's form, whose errors name `documents`."""
    return TEI_FORM if isinstance(value, dict) and "texts" in value else COHERE_FORM


def _document_shape(value: Any) -> str:
    return "document-object" if isinstance(value, dict) else "document-text"


@dataclass(frozen=True)
class RerankModels:
    tei: type[_Request]
    cohere: type[_Request]
    # Either model, chosen by the body's shape so that errors speak of that form only.
    request: Any


@cache
def rerank_models(limits: Limits) -> RerankModels:
    text_type = Annotated[str, Field(max_length=limits.max_text_chars)]
    count = Field(min_length=1, max_length=limits.max_rerank_texts)

    class CohereDocument(_Request):
        text: text_type

    document_type = Annotated[
        Annotated[text_type, Tag("document-text")]
        | Annotated[CohereDocument, Tag("document-object")],
        Discriminator(_document_shape),
    ]

    class TeiRerankRequest(_Request):
        """Hugging Face TEI's rerank request."""

        query: text_type
        texts: Annotated[list[text_type], count]
        raw_scores: bool = Field(
            default=False,
            description="Accepted for TEI clients; no effect: Eq. 7 has no activation to skip",
        )
        return_text: bool = Field(default=False, description="Each result carries its `text`")
        truncate: bool = Field(
            default=True,
            description="false: a text longer than the model reads is a 422 (TEI's default), "
            "instead of being cut and flagged `truncated`",
        )
        lambda_: LambdaField = None

    class CohereRerankRequest(_Request):
        """Cohere's rerank request (v1 and v2)."""

        query: text_type
        documents: Annotated[list[document_type], count]
        # JsonInt's validator after the bounds: the other way round (or the bounds on the
        # optional), pydantic writes them into the schema as "ge"/"le", which no JSON Schema
        # reader knows, so clients and schemathesis would not see them.
        top_n: (
            Annotated[int, Field(ge=1, le=limits.max_rerank_texts), *JsonInt.__metadata__] | None
        ) = Field(default=None, description="Return the best top_n results; default all")
        return_documents: bool = Field(
            default=False, description="Each result carries its `document`"
        )
        model: Annotated[str | None, Field(max_length=256)] = Field(
            default=None, description="Echoed in the response; the served model is always used"
        )
        lambda_: LambdaField = None

    return RerankModels(
        tei=TeiRerankRequest,
        cohere=CohereRerankRequest,
        request=Annotated[
            Annotated[TeiRerankRequest, Tag(TEI_FORM)]
            | Annotated[CohereRerankRequest, Tag(COHERE_FORM)],
            Discriminator(rerank_form),
        ],
    )


class TeiRerankResult(BaseModel):
    index: int = Field(description="Position of the text in the request's `texts`")
    score: float = Field(description="Eq. 7: lambda * rank + (1 - lambda) * cosine")
    cosine: float
    rank: float = Field(description="Spearman correlation of the two anchor-rank profiles")
    truncated: bool = Field(description="The text or the query was cut to the model's maximum")
    text: str | None = Field(default=None, description="Only with return_text")


class CohereDocumentOut(BaseModel):
    text: str


class CohereRerankResult(BaseModel):
    index: int = Field(description="Position of the document in the request's `documents`")
    relevance_score: float = Field(description="Eq. 7: lambda * rank + (1 - lambda) * cosine")
    cosine: float
    rank: float = Field(description="Spearman correlation of the two anchor-rank profiles")
    truncated: bool = Field(description="The text or the query was cut to the model's maximum")
    document: CohereDocumentOut | None = Field(
        default=None, description="Only with return_documents"
    )


class CohereRerankResponse(BaseModel):
    model_config = ConfigDict(serialize_by_alias=True, validate_by_name=True)

    id: str = Field(description="The request's id, as in the X-Request-Id header")
    results: list[CohereRerankResult] = Field(description="Best first")
    model: str
    lambda_: float = Field(alias="lambda")
    model_version: str


# TEI answers with a bare list, best first.
TeiRerankResponse = list[TeiRerankResult]
