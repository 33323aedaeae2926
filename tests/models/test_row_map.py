"""RowMap against a dict: the same answers whatever ids come, dense, negative or huge."""

import random

import numpy as np

from models.row_map import RowMap


def test_row_map_answers_as_a_dict_does() -> None:
    rng = random.Random(0)
    rows, reference = RowMap(), {}
    for _ in range(20_000):
        doc_id = rng.choice(
            [rng.randrange(3000), rng.randrange(-5, 0), 2**40 + rng.randrange(50),
             rng.randrange(5_000_000)]
        )  # fmt: skip
        action = rng.random()
        if action < 0.6:
            row = rng.randrange(10**6)
            rows.set(doc_id, row)
            reference[doc_id] = row
        elif action < 0.9:
            assert rows.pop(doc_id) == reference.pop(doc_id, None)
        else:
            assert rows.get(doc_id) == reference.get(doc_id)
            assert (doc_id in rows) == (doc_id in reference)
        assert len(rows) == len(reference)
    ids = np.array([*list(reference)[:300], 7, -3, 2**40 + 3, 99_999_999], dtype=np.int64)
    assert rows.rows(ids).tolist() == [reference.get(int(i), -1) for i in ids.tolist()]


def test_an_id_held_aside_is_found_after_the_table_grows_over_it() -> None:
    rows = RowMap()
    rows.set(3_000_000, 1)  # beyond what one id justifies: held aside
    for doc_id in range(300_000):
        rows.set(doc_id, doc_id + 2)
    rows.set(2_100_000, 0)  # within four times the ids held, plus slack: the table covers it
    assert rows.get(3_000_000) == 1
    assert rows.rows(np.array([3_000_000, 5, 900_000, 2_100_000])).tolist() == [1, 7, -1, 0]
    assert rows.pop(3_000_000) == 1
    assert 3_000_000 not in rows
    assert len(rows) == 300_001
