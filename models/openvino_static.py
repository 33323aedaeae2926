"""OpenVINO graphs compiled for one text of one length: some when the runner loads, the others
once single texts that need them keep coming (models/openvino_runner.py runs them).

A dynamic graph redoes shape inference and re-allocates whenever the shape changes, which single
texts of varied lengths meet on nearly every pass; a static graph does neither, and fuses its
attention further. On a Zen 4, single texts ran 1.28x (short) and 1.12x (long) as fast in
graphs compiled for their lengths (bench.single_texts). Each such graph holds its own repacked
weights: 33-53 MB whatever its length, and 0.27-0.42 s of a core to compile (docs/benchmarks.md).
Short lengths serve nearly every query, so they are compiled at load; a long one only earns its
memory in a replica that meets many long texts one at a time, so it is compiled when that
happens.
"""

import bisect
import logging
import threading
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, wait
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import openvino as ov

logger = logging.getLogger(__name__)

# Single texts that must need an on-demand length before its graph is compiled. The dynamic
# graph costs them 1.5-3.1 ms each more than the static one would, so the wait costs at most
# about 0.1 s, against 0.3-0.4 s of compiling that pays back only after 100-280 such texts; a
# replica that meets a long text now and then compiles nothing.
ON_DEMAND_AFTER = 32


def single_graph(lengths: Sequence[int], texts: int, tokens: int) -> int | None:
    """Which of the static graphs, compiled for one text of each of the sorted `lengths`,
    runs a pass of `texts` texts of `tokens` tokens: the shortest that holds it, else None."""
    if texts != 1:
        return None
    graph = bisect.bisect_left(lengths, tokens)
    return graph if graph < len(lengths) else None


def useful_lengths(
    at_load: Sequence[int], on_demand: Sequence[int], longest: int
) -> tuple[list[int], list[int]]:
    """The sorted lengths of `at_load` and of `on_demand` (less those already at load) that
    texts of at most `longest` tokens can use: those below it and the first that holds it. A
    graph past that would never run and still cost its memory."""
    ordered = sorted(set(at_load) | set(on_demand))
    useful = ordered[: bisect.bisect_left(ordered, longest) + 1]
    return [n for n in useful if n in at_load], [n for n in useful if n not in at_load]


class StaticGraphs:
    """The static graphs of one runner: `compile_for(length)` builds one; the lengths in
    `at_load` are compiled now, those in `on_demand` in a background thread after
    ON_DEMAND_AFTER single texts needed them. Until its graph is ready, and if compiling it
    fails, a text runs in the dynamic graph."""

    def __init__(
        self,
        compile_for: Callable[[int], "ov.InferRequest"],
        at_load: Sequence[int],
        on_demand: Sequence[int],
    ) -> None:
        self.lengths = sorted(set(at_load) | set(on_demand))
        self._compile_for = compile_for
        # Written by the compiling thread, read by passes: one dict store each, under the GIL.
        self._requests = {length: compile_for(length) for length in sorted(set(at_load))}
        self._needed: Counter[int] = Counter()
        self._started: set[int] = set(self._requests)
        self._lock = threading.Lock()
        self._compiles: list[Future[None]] = []
        self._executor: ThreadPoolExecutor | None = None

    def request(self, texts: int, tokens: int) -> tuple[int, "ov.InferRequest"] | None:
        """The length a pass of `texts` texts of `tokens` tokens is padded to, and the request of
        its static graph; None where it runs in the dynamic graph."""
        graph = single_graph(self.lengths, texts, tokens)
        if graph is None:
            return None
        length = self.lengths[graph]
        request = self._requests.get(length)
        if request is None:
            self._need(length)
            return None
        return length, request

    def compiled(self) -> list[int]:
        """The lengths whose graphs are ready."""
        return sorted(self._requests)

    def settle(self) -> None:
        """Wait for the graphs being compiled: benchmarks measure the steady state."""
        wait(list(self._compiles))

    def _need(self, length: int) -> None:
        with self._lock:
            if length in self._started:
                return
            self._needed[length] += 1
            if self._needed[length] < ON_DEMAND_AFTER:
                return
            self._started.add(length)
            if self._executor is None:
                self._executor = ThreadPoolExecutor(1, thread_name_prefix="openvino-compile")
            self._compiles.append(self._executor.submit(self._compile, length))

    def _compile(self, length: int) -> None:
        try:
            request = self._compile_for(length)
        except Exception:
            logger.exception(
                "compiling the graph for single texts of %d tokens failed; they stay in the "
                "dynamic graph",
                length,
            )
            return
        self._requests[length] = request
        logger.info("compiled a graph for single texts of up to %d tokens", length)
