"""The heap a replica keeps for life is frozen out of the garbage collector's sight
(service/heap.py): after its first engine, and after every swap."""

import asyncio
import gc
import weakref
from pathlib import Path

from service.engine import Engine, EngineHolder
from service.engine_switch import EngineSwitch
from service.heap import freeze_heap
from service.metrics import Metrics
from tests.polling import wait_until
from tests.service.conftest import fixed_engine, make_settings, serve


class Node:
    """A collectable object that can sit in a reference cycle and be watched by a weakref."""

    def __init__(self) -> None:
        self.partner: Node | None = None


def cycle() -> Node:
    first, second = Node(), Node()
    first.partner, second.partner = second, first
    return first


def tracked(obj: object) -> bool:
    """Whether the collector would walk `obj`: frozen objects are in no generation."""
    return any(candidate is obj for candidate in gc.get_objects())


def test_freezing_collects_the_garbage_and_hides_what_lives():
    garbage = weakref.ref(cycle())
    kept = cycle()
    freeze_heap(thaw=False)
    assert garbage() is None
    assert not tracked(kept)


def test_a_thawing_freeze_reclaims_cycles_that_died_while_frozen():
    # What a swap relies on: the previous engine was frozen while it served.
    node = cycle()
    freeze_heap(thaw=False)
    watched = weakref.ref(node)
    del node
    freeze_heap(thaw=False)
    assert watched() is not None  # frozen: only a thaw lets a collection reach it
    freeze_heap(thaw=True)
    assert watched() is None


def test_a_replica_freezes_its_heap_once_its_first_engine_is_in(tmp_path: Path, engine: Engine):
    before_start = cycle()
    assert tracked(before_start)
    with serve(make_settings(tmp_path), loader=fixed_engine(engine)) as server:
        server.wait_ready()
        wait_until(lambda: not tracked(before_start), message="the replica never froze its heap")


def test_a_swap_reclaims_what_died_while_frozen_and_freezes_the_rest(engine: Engine):
    switch = EngineSwitch(EngineHolder(), Metrics(), "float32", freezes_heap=True)
    previous = cycle()  # as the previous engine: frozen while it served, then let go
    freeze_heap(thaw=False)
    watched = weakref.ref(previous)
    del previous
    before_swap = cycle()
    asyncio.run(switch.swap(engine, None))
    assert switch.holder.current is engine
    assert watched() is None
    assert not tracked(before_swap)


def test_a_replica_told_not_to_leaves_its_heap_to_the_collector(tmp_path: Path, engine: Engine):
    before_start = cycle()
    with serve(make_settings(tmp_path, freeze_heap=False), loader=fixed_engine(engine)) as server:
        server.wait_ready()
        first_attempt = server.services.holder.first_attempt
        wait_until(first_attempt.is_set, message="the first engine never went in")
        assert tracked(before_start)
