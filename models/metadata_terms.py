"""Metadata filters of the search index: equality on flat JSON scalars, by posting lists."""

import json
import math
from collections import defaultdict
from collections.abc import Iterator, Mapping

Scalar = str | int | float | bool | None
Term = tuple[str, str]


def metadata_terms(metadata: Mapping[str, Scalar] | None) -> tuple[Term, ...]:
    """Canonical (key, value) terms: 1 and 1.0 are one value, True and 1 are not (JSON types)."""
    if not metadata:
        return ()
    return tuple(sorted((key, _canonical(value)) for key, value in metadata.items()))


def _canonical(value: Scalar) -> str:
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return json.dumps(int(value))
    return json.dumps(value)


class MetadataPostings:
    """Every stored id with its terms, and each term's ids: the filters' inverted index."""

    def __init__(self) -> None:
        self._terms: dict[int, tuple[Term, ...]] = {}  # every stored id -> its metadata terms
        self._postings: dict[Term, set[int]] = defaultdict(set)

    def __len__(self) -> int:
        return len(self._terms)

    def __contains__(self, doc_id: int) -> bool:
        return doc_id in self._terms

    def __iter__(self) -> Iterator[int]:
        return iter(self._terms)

    def add(self, doc_id: int, metadata: Mapping[str, Scalar] | None) -> None:
        terms = metadata_terms(metadata)
        self._terms[doc_id] = terms
        for term in terms:
            self._postings[term].add(doc_id)

    def discard(self, doc_id: int) -> None:
        for term in self._terms.pop(doc_id, ()):
            posting = self._postings[term]
            posting.discard(doc_id)
            if not posting:
                del self._postings[term]

    def allowed(self, where: Mapping[str, Scalar]) -> set[int]:
        """Ids whose metadata has every term of `where` (a non-empty filter)."""
        postings = sorted(
            (self._postings.get(term, set()) for term in metadata_terms(where)), key=len
        )
        allowed = set(postings[0])
        for posting in postings[1:]:
            allowed &= posting
        return allowed
