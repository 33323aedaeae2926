"""Which graph runs a pass in the OpenVINO runner; the graphs themselves run in
tests/models/test_backends.py."""

import pytest

from models.openvino_runner import single_graph, useful_lengths


@pytest.mark.parametrize(
    ("texts", "tokens", "graph"),
    [(1, 4, 0), (1, 16, 0), (1, 17, 1), (1, 32, 1), (1, 33, None), (2, 4, None)],
)
def test_a_single_text_takes_the_shortest_static_graph_that_holds_it(
    texts: int, tokens: int, graph: int | None
) -> None:
    assert single_graph([16, 32], texts, tokens) == graph


def test_without_static_graphs_every_pass_is_dynamic() -> None:
    assert single_graph([], 1, 4) is None


@pytest.mark.parametrize(
    ("longest", "lengths"),
    [(256, [16, 32, 64, 128, 256]), (100, [16, 32, 64, 128]), (8, [16]), (16, [16])],
)
def test_graphs_longer_than_any_text_are_not_compiled(longest: int, lengths: list[int]) -> None:
    assert useful_lengths([256, 16, 64, 32, 128, 32], longest) == lengths
