"""/search filters: the request models, the condition tree, its per-document predicate and its
posting-list evaluation, all held to a brute-force reading of Qdrant's semantics over random
metadata (hypothesis), plus Qdrant's own documented examples."""

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from core.settings import Settings
from models.metadata_filter import as_filter, compile_predicate
from models.metadata_terms import MetadataPostings
from service.corpus.filters import condition_tree, filter_kind
from service.corpus.schemas import DocumentLimits, document_models
from service.errors import validation_message
from tests.service.filter_reference import (
    filters,
    keys,
    metadatas,
    reference,
    reference_equality,
    scalars,
)

SEARCH = document_models(DocumentLimits.from_settings(Settings(_env_file=None))).search

FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def parsed(body_filter: Any) -> Any:
    return condition_tree(SEARCH.model_validate({"query": "q", "filter": body_filter}).filter)


@FAST
@given(st.lists(metadatas, min_size=1, max_size=25), filters, st.data())
def test_qdrant_filters_agree_with_the_reference(corpus: list[dict], body_filter: dict, data):
    tree = parsed(body_filter)
    expected = {i for i, metadata in enumerate(corpus) if reference(body_filter, metadata)}
    clause = as_filter(tree)
    if clause is None:  # no condition at all: every document passes
        assert expected == set(range(len(corpus)))
        return
    predicate = compile_predicate(clause)
    assert {i for i, metadata in enumerate(corpus) if predicate(metadata)} == expected
    postings = MetadataPostings()
    for i, metadata in enumerate(corpus):
        postings.add(i, metadata)
    assert postings.allowed(clause) == expected
    # Removing and rewriting documents keeps the posting lists in step.
    removed = data.draw(st.sets(st.sampled_from(range(len(corpus)))))
    rewritten = data.draw(st.dictionaries(st.sampled_from(range(len(corpus))), metadatas))
    for i in removed:
        postings.discard(i)
    for i, metadata in rewritten.items():
        postings.add(i, metadata)
        corpus[i] = metadata
    live = (set(range(len(corpus))) - removed) | set(rewritten)
    assert postings.allowed(clause) == {i for i in live if reference(body_filter, corpus[i])}


@FAST
@given(st.lists(metadatas, min_size=1, max_size=25), st.dictionaries(keys, scalars, max_size=3))
def test_flat_equality_filters_agree_with_the_reference(corpus: list[dict], where: dict):
    assert filter_kind(where) == "equality-filter"
    clause = as_filter(parsed(where))
    expected = {i for i, metadata in enumerate(corpus) if reference_equality(where, metadata)}
    if clause is None:
        assert where == {}
        return
    postings = MetadataPostings()
    for i, metadata in enumerate(corpus):
        postings.add(i, metadata)
    assert postings.allowed(clause) == expected
    predicate = compile_predicate(clause)
    assert {i for i, metadata in enumerate(corpus) if predicate(metadata)} == expected


# Qdrant's documentation example, and the payload of its condition checker's own test.
CITIES = [
    {"city": "London", "color": "green"},
    {"city": "London", "color": "red"},
    {"city": "London", "color": "blue"},
    {"city": "Berlin", "color": "red"},
    {"city": "Moscow", "color": "green"},
    {"city": "Moscow", "color": "blue"},
]
LONDON, RED = (
    {"key": "city", "match": {"value": "London"}},
    {"key": "color", "match": {"value": "red"}},
)
PAYLOAD = {
    "price": 499.90,
    "amount": 10,
    "rating": [3, 7, 9, 9],
    "color": "red",
    "has_delivery": True,
    "parts": [],
    "packaging": None,
    "not_null": [None],
}


@pytest.mark.parametrize(
    ("body_filter", "expected"),
    [
        ({"must": [LONDON, RED]}, [2]),
        ({"should": [LONDON, RED]}, [1, 2, 3, 4]),
        ({"must_not": [LONDON, RED]}, [5, 6]),
        ({"must": [LONDON], "must_not": [RED]}, [1, 3]),
        ({"must_not": [{"must": [LONDON, RED]}]}, [1, 3, 4, 5, 6]),
        ({"must": {"key": "color", "match": {"any": ["red", "blue"]}}}, [2, 3, 4, 6]),
        ({"must": {"key": "color", "match": {"except": ["red", "blue"]}}}, [1, 5]),
        ({"should": []}, [1, 2, 3, 4, 5, 6]),  # an empty should constrains nothing
    ],
)
def test_qdrant_documentation_examples(body_filter: dict, expected: list[int]):
    predicate = compile_predicate(parsed(body_filter))
    assert [i + 1 for i, point in enumerate(CITIES) if predicate(point)] == expected


@pytest.mark.parametrize(
    ("condition", "holds"),
    [
        ({"is_empty": {"key": "price"}}, False),
        ({"is_empty": {"key": "something_new"}}, True),
        ({"is_empty": {"key": "parts"}}, True),
        ({"is_empty": {"key": "packaging"}}, True),
        ({"is_empty": {"key": "not_null"}}, False),
        ({"is_null": {"key": "amount"}}, False),
        ({"is_null": {"key": "parts"}}, False),
        ({"is_null": {"key": "something_else"}}, False),
        ({"is_null": {"key": "packaging"}}, True),
        ({"is_null": {"key": "not_null"}}, False),
        ({"key": "rating", "match": {"value": 9}}, True),
        ({"key": "rating", "match": {"except": [3, 7, 9]}}, False),
        ({"key": "rating", "match": {"except": [3, 7]}}, True),
        ({"key": "rating", "range": {"gt": 8, "lt": 9}}, False),
        ({"key": "rating", "range": {"gte": 9}}, True),
        ({"key": "price", "range": {"gt": 400.5, "lte": 500}}, True),
        ({"key": "color", "range": {"gte": 0}}, False),  # a string is not a number
        ({"key": "has_delivery", "match": {"value": True}}, True),
        ({"key": "has_delivery", "match": {"value": 1}}, False),  # true is not 1
        ({"key": "amount", "match": {"value": 10.0}}, True),  # 10.0 is the integer 10
        ({"key": "packaging", "match": {"except": ["x"]}}, False),  # null is no value
        ({"key": "parts", "match": {"except": ["x"]}}, False),
        ({"key": "missing", "match": {"except": ["x"]}}, False),
        ({"key": "price", "match": {"value": 1}, "range": {"gt": 0}}, True),  # either holds
    ],
)
def test_qdrant_condition_checker_payload(condition: dict, holds: bool):
    tree = parsed({"must": [condition]})
    assert compile_predicate(tree)(PAYLOAD) is holds
    postings = MetadataPostings()
    postings.add(7, PAYLOAD)
    assert postings.allowed(tree) == ({7} if holds else set())


@pytest.mark.parametrize(
    ("body_filter", "kind"),
    [
        ({"lang": "fr"}, "equality-filter"),
        ({"must": "x"}, "equality-filter"),  # a metadata key named must, a scalar value
        ({"must": None, "lang": "fr"}, "equality-filter"),
        ({}, "equality-filter"),
        ({"must": None}, "qdrant-filter"),
        ({"must": []}, "qdrant-filter"),
        ({"should": {"is_null": {"key": "a"}}}, "qdrant-filter"),
        ({"must": [], "lang": "fr"}, "qdrant-filter"),  # then a 422: lang is no clause
    ],
)
def test_which_form_a_filter_is_read_as(body_filter: dict, kind: str):
    assert filter_kind(body_filter) == kind


@pytest.mark.parametrize(
    ("body_filter", "message"),
    [
        (
            {"must": [{"key": "price", "range": {"gt": "cheap"}}]},
            "filter.must[0]: Value error, condition on key 'price': range.gt: Input should be a "
            "valid number",
        ),
        ({"must": {"key": "price", "range": {"lt": True}}}, "condition on key 'price': range.lt"),
        (
            {"must": {"key": "tag", "match": {"any": ["a", 1]}}},
            "condition on key 'tag': match.any[1]",
        ),
        (
            {"must": {"key": "tag", "match": {"value": 1.5}}},
            "condition on key 'tag': match.value: must be a string",
        ),
        (
            {"must": {"key": "tag", "match": {"value": None}}},
            "use range for other numbers and is_null for null",
        ),
        ({"must": {"key": "tag"}}, "condition on key 'tag': needs `match` or `range`"),
        ({"must": {"key": "tag", "match": None, "range": None}}, "condition on key 'tag': needs"),
        (
            {"must": {"key": "tag", "match": {"text": "a"}}},
            "condition on key 'tag': match.value: Field required; match.text: Extra inputs",
        ),
        (
            {"must": {"key": "tag", "values_count": {"gt": 1}}},
            "condition on key 'tag': values_count: Extra inputs",
        ),
        (
            {"must": {"key": "no spaces", "match": {"value": 1}}},
            "condition on key 'no spaces': key: String should match pattern",
        ),
        ({"should": [{"color": "red"}]}, "filter.should[0].color: Extra inputs are not permitted"),
        (
            {"must_not": [{"is_null": {"name": "a"}}]},
            "filter.must_not[0].is_null.key: Field required",
        ),
        ({"must": [], "lang": "fr"}, "filter.lang: Extra inputs are not permitted"),
        ({"must": [LONDON] * 65}, "filter.must: List should have at most 64 items"),
        (
            {"must": {"key": "a", "range": {"gt": 1e400}}},
            "condition on key 'a': range.gt: Input should be a finite number",
        ),
        ({"lang": ["fr"]}, "filter.lang"),  # the flat form takes scalars only
    ],
)
def test_malformed_filters_name_the_key(body_filter: dict, message: str):
    with pytest.raises(ValidationError) as caught:
        SEARCH.model_validate({"query": "q", "filter": body_filter})
    assert message in validation_message(caught.value.errors())
