"""A brute-force reading of Qdrant's filter semantics, and hypothesis strategies for random
metadata and filters: the reference the /search filter tests hold the service to."""

from typing import Any

from hypothesis import strategies as st

KEYS = ["a", "b", "c"]

# --- the reference: Qdrant's semantics read straight off its documentation and checker ---


def json_equal(stored: Any, wanted: Any) -> bool:
    """Equality of JSON values: booleans are not numbers, 1 equals 1.0, null equals null."""
    if isinstance(stored, bool) or isinstance(wanted, bool):
        return type(stored) is type(wanted) and stored == wanted
    if isinstance(stored, int | float) and isinstance(wanted, int | float):
        return stored == wanted
    if stored is None or wanted is None:
        return stored is None and wanted is None
    return isinstance(stored, str) and isinstance(wanted, str) and stored == wanted


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def reference_field(condition: dict, metadata: dict) -> bool:
    key = condition["key"]
    if key not in metadata:
        return False
    stored = metadata[key] if isinstance(metadata[key], list) else [metadata[key]]
    holds = False
    match = condition.get("match")
    if match is not None and "value" in match:
        holds |= any(json_equal(v, match["value"]) for v in stored)
    elif match is not None and "any" in match:
        holds |= any(json_equal(v, w) for v in stored for w in match["any"])
    elif match is not None:
        holds |= any(
            v is not None and not any(json_equal(v, w) for w in match["except"]) for v in stored
        )
    bounds = condition.get("range")
    if bounds is not None:
        tests = {
            "gt": lambda x, b: x > b,
            "gte": lambda x, b: x >= b,
            "lt": lambda x, b: x < b,
            "lte": lambda x, b: x <= b,
        }
        holds |= any(
            is_number(v)
            and all(
                test(v, bounds[name])
                for name, test in tests.items()
                if bounds.get(name) is not None
            )
            for v in stored
        )
    return holds


def as_list(clause: Any) -> list:
    if clause is None:
        return []
    return clause if isinstance(clause, list) else [clause]


def reference(condition: dict, metadata: dict) -> bool:
    if "key" in condition:
        return reference_field(condition, metadata)
    if "is_null" in condition:
        key = condition["is_null"]["key"]
        return key in metadata and metadata[key] is None
    if "is_empty" in condition:
        key = condition["is_empty"]["key"]
        return key not in metadata or metadata[key] is None or metadata[key] == []
    should = as_list(condition.get("should"))
    return (
        all(reference(c, metadata) for c in as_list(condition.get("must")))
        and (not should or any(reference(c, metadata) for c in should))
        and not any(reference(c, metadata) for c in as_list(condition.get("must_not")))
    )


def reference_equality(where: dict, metadata: dict) -> bool:
    def holds(key: str, value: Any) -> bool:
        if key not in metadata:
            return False
        stored = metadata[key] if isinstance(metadata[key], list) else [metadata[key]]
        return any(json_equal(v, value) for v in stored)

    return all(holds(key, value) for key, value in where.items())


# --- random metadata and filters ---

scalars = st.sampled_from([None, True, False, 0, 1, 1.0, 2, 2.5, -1, "x", "y", "1", ""])
values = st.one_of(scalars, st.lists(scalars, max_size=3))
metadatas = st.dictionaries(st.sampled_from(KEYS), values, max_size=3)
keys = st.sampled_from(KEYS)
strings = st.sampled_from(["x", "y", "1", "", "z"])
integers = st.sampled_from([-1, 0, 1, 2, 3])
bound = st.one_of(st.none(), st.sampled_from([-1, 0, 0.5, 1, 1.0, 2, 2.5, 3]))
match = st.one_of(
    st.builds(lambda v: {"value": v}, st.one_of(strings, integers, st.booleans())),
    st.builds(
        lambda v: {"any": v},
        st.one_of(st.lists(strings, max_size=3), st.lists(integers, max_size=3)),
    ),
    st.builds(
        lambda v: {"except": v},
        st.one_of(st.lists(strings, max_size=3), st.lists(integers, max_size=3)),
    ),
)
ranges = st.fixed_dictionaries({}, optional={"gt": bound, "gte": bound, "lt": bound, "lte": bound})
field_condition = st.one_of(
    st.fixed_dictionaries({"key": keys, "match": match}),
    st.fixed_dictionaries({"key": keys, "range": ranges}),
    st.fixed_dictionaries({"key": keys, "match": match, "range": ranges}),
)
leaf = st.one_of(
    field_condition,
    st.builds(lambda k: {"is_null": {"key": k}}, keys),
    st.builds(lambda k: {"is_empty": {"key": k}}, keys),
)


def clauses(children: st.SearchStrategy) -> st.SearchStrategy:
    one_or_many = st.one_of(st.none(), children, st.lists(children, max_size=3))
    return st.fixed_dictionaries(
        {}, optional={"must": one_or_many, "should": one_or_many, "must_not": one_or_many}
    )


filters = clauses(st.recursive(leaf, clauses, max_leaves=6))
