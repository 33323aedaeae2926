"""Metadata filters in Qdrant's vocabulary: the condition tree and its per-document predicate.

A document's metadata is a flat JSON object whose values are scalars (string, number, boolean,
null) or arrays of scalars. The conditions and their meaning follow Qdrant's filtering
(qdrant.tech/documentation/concepts/filtering, and its query checker):

- `Match` (`match.value` / `match.any`): some stored value (the scalar, or any element of the
  array) is one of `values`. A missing key, null or [] never matches.
- `Match` with `negate` (`match.except`): some stored value is none of `values`; null is no
  value here, so a missing key, null, [] and [null] never match, and ["a", "b"] matches
  except ["a"].
- `Range`: some stored number lies in the range; strings and booleans are not numbers.
- `IsNull`: the key is present with the value null ([null] is an array, not null).
- `IsEmpty`: the key is missing, null or [] ([null] is not empty).
- `Clause`: every `must`, at least one `should` (when there are any), no `must_not`; clauses
  nest.

Values compare by their JSON type, as the flat equality filter always did: 1 and 1.0 are one
number (JSON cannot tell them apart), `true` is not 1 and "1" is not 1. models/metadata_terms.py
evaluates the same tree over a whole index with posting lists; `compile_predicate` evaluates it
on one document (reading documents back after a search). The tests hold both to a brute-force
evaluator over random metadata.
"""

import json
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

Scalar = str | int | float | bool | None
MetadataValue = Scalar | list[Scalar] | tuple[Scalar, ...]
Metadata = Mapping[str, MetadataValue]
Predicate = Callable[[Metadata], bool]

NULL = "null"  # the canonical form of JSON null


def canonical(value: Scalar) -> str:
    """One string per JSON value: 1 and 1.0 are one value, True and 1 are not (JSON types)."""
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return json.dumps(int(value))
    return json.dumps(value)


def elements(value: MetadataValue) -> Iterable[Scalar]:
    """The stored values a condition looks at: the scalar itself, or each array element."""
    return value if isinstance(value, list | tuple) else (value,)


def is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass(frozen=True)
class Match:
    key: str
    values: frozenset[str]  # canonical forms
    negate: bool = False  # `except`: some stored value is none of `values`


@dataclass(frozen=True)
class Range:
    key: str
    gt: float | None = None
    gte: float | None = None
    lt: float | None = None
    lte: float | None = None

    def contains(self, number: float) -> bool:
        return (
            (self.gt is None or number > self.gt)
            and (self.gte is None or number >= self.gte)
            and (self.lt is None or number < self.lt)
            and (self.lte is None or number <= self.lte)
        )


@dataclass(frozen=True)
class IsNull:
    key: str


@dataclass(frozen=True)
class IsEmpty:
    key: str


@dataclass(frozen=True)
class Clause:
    must: tuple["Condition", ...] = ()
    should: tuple["Condition", ...] = ()
    must_not: tuple["Condition", ...] = ()

    @property
    def is_trivial(self) -> bool:
        """No condition at all: every document passes (Qdrant: an empty `should` too)."""
        return not (self.must or self.should or self.must_not)


Condition = Match | Range | IsNull | IsEmpty | Clause
# What search callers pass: a condition tree, or the flat equality object of earlier versions.
Where = Clause | Mapping[str, Scalar] | None


def equality_filter(where: Mapping[str, Scalar]) -> Clause:
    """The flat object {key: value, ...}: each key holds its value (or has it among its array)."""
    return Clause(must=tuple(Match(key, frozenset({canonical(v)})) for key, v in where.items()))


def as_filter(where: Where) -> Clause | None:
    """The condition tree of `where`; None when it lets every document through."""
    if where is None:
        return None
    clause = where if isinstance(where, Clause) else equality_filter(where)
    return None if clause.is_trivial else clause


def compile_predicate(condition: Condition) -> Predicate:
    """A function of one document's metadata that is true where `condition` holds."""
    if isinstance(condition, Match):
        return _match_predicate(condition)
    if isinstance(condition, Range):
        key, bounds = condition.key, condition

        def in_range(metadata: Metadata) -> bool:
            if key not in metadata:
                return False
            return any(is_number(x) and bounds.contains(float(x)) for x in elements(metadata[key]))

        return in_range
    if isinstance(condition, IsNull):
        null_key = condition.key
        return lambda metadata: null_key in metadata and metadata[null_key] is None
    if isinstance(condition, IsEmpty):
        empty_key = condition.key
        return lambda metadata: metadata.get(empty_key) in (None, [], ())
    must = [compile_predicate(c) for c in condition.must]
    should = [compile_predicate(c) for c in condition.should]
    must_not = [compile_predicate(c) for c in condition.must_not]

    def clause(metadata: Metadata) -> bool:
        return (
            all(p(metadata) for p in must)
            and (not should or any(p(metadata) for p in should))
            and not any(p(metadata) for p in must_not)
        )

    return clause


def _match_predicate(condition: Match) -> Predicate:
    key, values = condition.key, condition.values
    if condition.negate:

        def except_(metadata: Metadata) -> bool:
            if key not in metadata:
                return False
            terms = (canonical(x) for x in elements(metadata[key]))
            return any(t != NULL and t not in values for t in terms)

        return except_

    def match(metadata: Metadata) -> bool:
        if key not in metadata:
            return False
        return any(canonical(x) in values for x in elements(metadata[key]))

    return match
