"""Metadata filters over the search index: posting lists, and the condition tree of
models/metadata_filter.py evaluated on them as set algebra.

Each (key, canonical value) term has the set of ids holding it, as a scalar or as an array
element. A match is a union of postings; `except` and ranges walk the key's distinct values
(not its documents); is_null and is_empty read two per-key id sets. Only `must_not`,
`is_empty` and a clause without `must` start from the set of every id.
"""

from collections.abc import Iterator, Mapping

from models.metadata_filter import (
    NULL,
    Clause,
    Condition,
    IsEmpty,
    IsNull,
    Match,
    Metadata,
    MetadataValue,
    Range,
    canonical,
    elements,
    is_number,
)

Term = tuple[str, str]


def metadata_terms(metadata: Mapping[str, MetadataValue] | None) -> tuple[Term, ...]:
    """Canonical (key, value) terms, one per scalar or distinct array element."""
    if not metadata:
        return ()
    return tuple(
        sorted({(key, canonical(x)) for key, value in metadata.items() for x in elements(value)})
    )


class MetadataPostings:
    """Every stored id with its metadata, and the filters' inverted index over it."""

    def __init__(self) -> None:
        self._metadata: dict[int, Metadata] = {}  # every stored id -> its metadata
        self._postings: dict[Term, set[int]] = {}
        # key -> each distinct canonical value it holds -> that value as a number (None: not one)
        self._values: dict[str, dict[str, float | None]] = {}
        self._null: dict[str, set[int]] = {}  # key -> ids whose value is null
        self._filled: dict[str, set[int]] = {}  # key -> ids whose value is neither null nor []

    def __len__(self) -> int:
        return len(self._metadata)

    def __contains__(self, doc_id: int) -> bool:
        return doc_id in self._metadata

    def __iter__(self) -> Iterator[int]:
        return iter(self._metadata)

    def add(self, doc_id: int, metadata: Metadata | None) -> None:
        self.discard(doc_id)
        stored = dict(metadata or {})
        self._metadata[doc_id] = stored
        for key, value in stored.items():
            if value is None:
                self._null.setdefault(key, set()).add(doc_id)
            elif not isinstance(value, list | tuple) or value:
                self._filled.setdefault(key, set()).add(doc_id)
            for x in elements(value):
                term = (key, canonical(x))
                posting = self._postings.get(term)
                if posting is None:
                    posting = self._postings[term] = set()
                    self._values.setdefault(key, {})[term[1]] = float(x) if is_number(x) else None
                posting.add(doc_id)

    def discard(self, doc_id: int) -> None:
        metadata = self._metadata.pop(doc_id, None)
        if metadata is None:
            return
        for key, value in metadata.items():
            for per_key in (self._null, self._filled):
                ids = per_key.get(key)
                if ids is not None:
                    ids.discard(doc_id)
                    if not ids:
                        del per_key[key]
            for x in elements(value):
                term = (key, canonical(x))
                posting = self._postings.get(term)
                if posting is None:
                    continue  # a repeated array element, already discarded
                posting.discard(doc_id)
                if not posting:
                    del self._postings[term]
                    values = self._values[key]
                    del values[term[1]]
                    if not values:
                        del self._values[key]

    def allowed(self, where: Clause) -> set[int]:
        """Ids whose metadata satisfies `where`: a new set, the caller's to keep."""
        return self._select(where)

    # Every branch returns a set of its own, so callers may change it in place.
    def _select(self, condition: Condition) -> set[int]:
        if isinstance(condition, Match):
            return self._union(self._match_terms(condition), condition.key)
        if isinstance(condition, Range):
            values = self._values.get(condition.key, {})
            terms = [t for t, x in values.items() if x is not None and condition.contains(x)]
            return self._union(terms, condition.key)
        if isinstance(condition, IsNull):
            return set(self._null.get(condition.key, ()))
        if isinstance(condition, IsEmpty):
            return self._all() - self._filled.get(condition.key, set())
        return self._select_clause(condition)

    def _select_clause(self, clause: Clause) -> set[int]:
        result: set[int] | None = None
        for condition in clause.must:
            selected = self._select(condition)
            result = selected if result is None else result & selected
            if not result:
                return set()
        if clause.should:
            union = set().union(*(self._select(c) for c in clause.should))
            result = union if result is None else result & union
        if clause.must_not:
            excluded = set().union(*(self._select(c) for c in clause.must_not))
            result = (self._all() if result is None else result) - excluded
        return self._all() if result is None else result

    def _match_terms(self, match: Match) -> list[str]:
        if not match.negate:
            return list(match.values)
        values = self._values.get(match.key, {})
        return [t for t in values if t != NULL and t not in match.values]

    def _union(self, terms: list[str], key: str) -> set[int]:
        postings = [p for t in terms if (p := self._postings.get((key, t))) is not None]
        return set().union(*postings)

    def _all(self) -> set[int]:
        return set(self._metadata)
