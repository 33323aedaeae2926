"""Which graph runs a pass in the OpenVINO runner, and when a graph is compiled on demand,
with a stand-in for the compiler; the graphs themselves run in tests/models/test_backends.py."""

import logging
import threading

import pytest

from models.openvino_static import ON_DEMAND_AFTER, StaticGraphs, single_graph, useful_lengths


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
    ("longest", "at_load", "on_demand"),
    [
        (256, [16, 32], [64, 128, 256]),
        (100, [16, 32], [64, 128]),
        (8, [16], []),
        (16, [16], []),
        (20, [16, 32], []),
    ],
)
def test_graphs_longer_than_any_text_are_not_compiled(
    longest: int, at_load: list[int], on_demand: list[int]
) -> None:
    lengths = useful_lengths([32, 16, 32], [256, 16, 64, 128], longest)
    assert lengths == (at_load, on_demand)


class Compiler:
    """Stands in for OpenVINO: records each length compiled, and can hold a compile until
    released, or fail."""

    def __init__(self, *, fail: bool = False, hold: bool = False) -> None:
        self.lengths: list[int] = []
        self.fail = fail
        self.released = threading.Event()
        if not hold:
            self.released.set()

    def __call__(self, length: int) -> str:
        self.lengths.append(length)
        assert self.released.wait(timeout=30)
        if self.fail:
            raise RuntimeError("no memory")
        return f"request {length}"


def _need(graphs: StaticGraphs, tokens: int, times: int) -> None:
    for _ in range(times):
        assert graphs.request(1, tokens) is None


def test_lengths_at_load_are_compiled_at_once_and_serve_single_texts() -> None:
    compiler = Compiler()
    graphs = StaticGraphs(compiler, [32, 16], [64])
    assert compiler.lengths == [16, 32] and graphs.compiled() == [16, 32]
    assert graphs.request(1, 20) == (32, "request 32")
    assert graphs.request(2, 20) is None  # two texts: the dynamic graph


def test_a_length_on_demand_is_compiled_after_enough_single_texts_need_it() -> None:
    compiler = Compiler()
    graphs = StaticGraphs(compiler, [16], [64, 128])
    _need(graphs, 40, ON_DEMAND_AFTER // 2)
    _need(graphs, 64, ON_DEMAND_AFTER - ON_DEMAND_AFTER // 2 - 1)
    _need(graphs, 100, ON_DEMAND_AFTER - 1)  # another length's count
    for _ in range(3):
        graphs.request(2, 40)  # batches need none
    graphs.settle()
    assert compiler.lengths == [16]
    _need(graphs, 33, 1)  # the last in the dynamic graph
    graphs.settle()
    assert compiler.lengths == [16, 64] and graphs.compiled() == [16, 64]
    assert graphs.request(1, 50) == (64, "request 64")
    assert graphs.request(1, 100) is None


def test_a_length_is_compiled_once_while_texts_keep_coming() -> None:
    compiler = Compiler(hold=True)
    graphs = StaticGraphs(compiler, [], [64])
    _need(graphs, 50, 3 * ON_DEMAND_AFTER)
    compiler.released.set()
    graphs.settle()
    assert compiler.lengths == [64]
    assert graphs.request(1, 50) == (64, "request 64")


def test_a_failed_compile_leaves_its_texts_in_the_dynamic_graph(
    caplog: pytest.LogCaptureFixture,
) -> None:
    compiler = Compiler(fail=True)
    graphs = StaticGraphs(compiler, [], [64])
    with caplog.at_level(logging.ERROR, logger="models.openvino_static"):
        _need(graphs, 50, ON_DEMAND_AFTER)
        graphs.settle()
    assert "64 tokens failed" in caplog.text
    _need(graphs, 50, 2 * ON_DEMAND_AFTER)  # and it is not tried again
    graphs.settle()
    assert compiler.lengths == [64] and graphs.compiled() == []
