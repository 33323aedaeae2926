"""The `filter` of POST /search: Qdrant's filter object, or the flat equality object of earlier
versions, as request models; `condition_tree` turns either into models/metadata_filter.py's tree.

Qdrant's JSON is taken as Qdrant documents it (must/should/must_not, each a condition or a
list of them, nestable; match value/any/except, range, is_null, is_empty), so its users need no
new words. A mistake inside a field condition is one 422 that names the metadata key.
"""

from typing import Annotated, Any

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    StrictStr,
    Tag,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)

from models.metadata_filter import (
    Clause,
    Condition,
    IsEmpty,
    IsNull,
    Match,
    Range,
    Scalar,
    canonical,
    equality_filter,
)
from service.errors import validation_message

CLAUSES = ("must", "should", "must_not")
MAX_CLAUSE_CONDITIONS = 64  # conditions in one must/should/must_not list
MAX_MATCH_VALUES = 256  # values of one match.any or match.except
SAFE_INT = 2**53  # JSON numbers past this lose precision in JavaScript clients


def json_integer(value: object) -> object:
    """JSON Schema's integer: 5 and 5.0, but not `true` or "5" (pydantic's lax int takes both)."""
    if isinstance(value, bool | str):
        raise ValueError("Input should be a valid integer")
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


MetadataKey = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,63}$")]
MatchString = Annotated[StrictStr, Field(max_length=256)]
# The bounds come before the validator: after it, pydantic would write them into the JSON
# schema as unknown "ge"/"le" keywords rather than minimum/maximum.
MatchInteger = Annotated[int, Field(ge=-SAFE_INT, le=SAFE_INT), BeforeValidator(json_integer)]
MatchList = (
    Annotated[list[MatchString], Field(max_length=MAX_MATCH_VALUES)]
    | Annotated[list[MatchInteger], Field(max_length=MAX_MATCH_VALUES)]
)
Bound = Annotated[float, Field(strict=True, allow_inf_nan=False)] | None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_by_name=True, validate_by_alias=True)


def _one_match_error(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    # One sentence instead of one error per member of the union.
    try:
        return handler(value)
    except ValidationError:
        raise ValueError(
            "must be a string (up to 256 characters), an integer or a boolean; "
            "use range for other numbers and is_null for null"
        ) from None


class MatchValue(_Strict):
    """A stored value (or array element) equals `value`: a string, an integer or a boolean."""

    value: Annotated[StrictBool | MatchInteger | MatchString, WrapValidator(_one_match_error)]


class MatchAny(_Strict):
    """A stored value is one of `any` (all strings, or all integers)."""

    any: MatchList


class MatchExcept(_Strict):
    """A stored value is none of `except`; a missing key, null and [] never match."""

    except_: MatchList = Field(alias="except")


def _match_kind(value: Any) -> str:
    if isinstance(value, dict):
        for kind in ("any", "except"):
            if kind in value:
                return f"match-{kind}"
    return "match-value"


# Tags that are not identifiers: the error locations of service/errors.py leave them out.
MatchCondition = Annotated[
    Annotated[MatchValue, Tag("match-value")]
    | Annotated[MatchAny, Tag("match-any")]
    | Annotated[MatchExcept, Tag("match-except")],
    Discriminator(_match_kind),
]


class RangeBounds(_Strict):
    """Some stored number is > gt, >= gte, < lt and <= lte (each bound given)."""

    gt: Bound = None
    gte: Bound = None
    lt: Bound = None
    lte: Bound = None


class FieldCondition(_Strict):
    model_config = ConfigDict(
        # `match` or `range` (Qdrant: both given, either may hold), not null.
        json_schema_extra={
            "anyOf": [
                {"required": ["match"], "properties": {"match": {"type": "object"}}},
                {"required": ["range"], "properties": {"range": {"type": "object"}}},
            ]
        }
    )

    key: MetadataKey
    match: MatchCondition | None = None
    range: RangeBounds | None = None

    @model_validator(mode="wrap")
    @classmethod
    def _name_the_key(cls, data: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        key = data.get("key") if isinstance(data, dict) else None
        try:
            condition = handler(data)
        except ValidationError as error:
            if not isinstance(key, str):
                raise
            # pydantic's "Value error, " prefix once, on the outer message, not on each part.
            reason = validation_message(list(error.errors())).replace("Value error, ", "")
            raise ValueError(f"condition on key {key[:64]!r}: {reason}") from None
        if condition.match is None and condition.range is None:
            raise ValueError(f"condition on key {condition.key!r}: needs `match` or `range`")
        return condition


class PayloadField(_Strict):
    key: MetadataKey


class IsNullCondition(_Strict):
    """The key is present and null."""

    is_null: PayloadField


class IsEmptyCondition(_Strict):
    """The key is missing, null or []."""

    is_empty: PayloadField


def _condition_kind(value: Any) -> str:
    if isinstance(value, dict):
        if "key" in value:
            return "field-condition"
        for kind in ("is_null", "is_empty"):
            if kind in value:
                return kind.replace("_", "-")
    return "nested-filter"


def _one_or_many(value: Any) -> Any:
    # Qdrant takes one condition where it takes a list of them.
    return [value] if isinstance(value, dict) else value


ConditionModel = Annotated[
    Annotated[FieldCondition, Tag("field-condition")]
    | Annotated[IsNullCondition, Tag("is-null")]
    | Annotated[IsEmptyCondition, Tag("is-empty")]
    | Annotated["QdrantFilter", Tag("nested-filter")],
    Discriminator(_condition_kind),
]
ConditionList = Annotated[list[ConditionModel], Field(max_length=MAX_CLAUSE_CONDITIONS)]
ClauseList = Annotated[
    ConditionList | None,
    BeforeValidator(_one_or_many, json_schema_input_type=ConditionModel | ConditionList | None),
]


class QdrantFilter(_Strict):
    """Qdrant's filter: every `must`, at least one `should` (if any), no `must_not`."""

    must: ClauseList = None
    should: ClauseList = None
    must_not: ClauseList = None


QdrantFilter.model_rebuild()


def filter_kind(value: Any) -> str:
    """Qdrant's object where a clause key holds a list or an object (or every key is a clause
    key and null); the flat equality object otherwise, so a metadata key named `must` still
    works there with a scalar."""
    if isinstance(value, dict) and value:
        clauses = [value[k] for k in CLAUSES if k in value]
        if any(isinstance(c, list | dict) for c in clauses):
            return "qdrant-filter"
        if len(clauses) == len(value) and all(c is None for c in clauses):
            return "qdrant-filter"
    return "equality-filter"


def filter_field_schema(schema: dict[str, Any]) -> None:
    """Either form may describe `{}` or `{"must": null}`: anyOf, not pydantic's oneOf."""
    for branch in schema.get("anyOf", [schema]):
        if "oneOf" in branch:
            branch["anyOf"] = branch.pop("oneOf")


def condition_tree(value: QdrantFilter | dict[str, Scalar] | None) -> Clause | None:
    """The request's filter as a condition tree (None: no filter)."""
    if value is None:
        return None
    if isinstance(value, QdrantFilter):
        return _clause(value)
    return equality_filter(value)


def _clause(value: QdrantFilter) -> Clause:
    def conditions(items: list[Any] | None) -> tuple[Condition, ...]:
        return tuple(_condition(item) for item in items or ())

    return Clause(conditions(value.must), conditions(value.should), conditions(value.must_not))


def _condition(value: Any) -> Condition:
    if isinstance(value, IsNullCondition):
        return IsNull(value.is_null.key)
    if isinstance(value, IsEmptyCondition):
        return IsEmpty(value.is_empty.key)
    if isinstance(value, QdrantFilter):
        return _clause(value)
    assert isinstance(value, FieldCondition)
    found: list[Condition] = []
    if value.match is not None:
        found.append(_match(value.key, value.match))
    if value.range is not None:
        bounds = value.range
        found.append(Range(value.key, bounds.gt, bounds.gte, bounds.lt, bounds.lte))
    # Both given: Qdrant's field condition holds where either does.
    return found[0] if len(found) == 1 else Clause(should=tuple(found))


def _match(key: str, match: MatchValue | MatchAny | MatchExcept) -> Match:
    if isinstance(match, MatchValue):
        return Match(key, frozenset({canonical(match.value)}))
    if isinstance(match, MatchAny):
        return Match(key, frozenset(canonical(v) for v in match.any))
    return Match(key, frozenset(canonical(v) for v in match.except_), negate=True)
