"""What a replica keeps for life is frozen out of the cyclic garbage collector's sight.

A replica's imports (torch, transformers, OpenVINO, NNCF) leave about 490,000 objects that the
collector tracks, and the engine adds its own. They live as long as the process, yet every full
collection walked them all: 255 ms on an idle 2-core AMD EPYC Zen 4, 360-610 ms under load, with
the GIL held, so no request moved and the encoder ran out of work. Under 64 one-text clients that
came every 6 s or so, and doubled the p99 latency (`python -m bench.replicas`, docs/api.md).
`gc.freeze()` moves every tracked object into a permanent generation that collections skip
(CPython's advice for long-lived startup state); a full collection then walks only what was
made since, in about 2 ms. RANKSERVE_FREEZE_HEAP=false turns this off.

A swap thaws the heap first, so the collector can reclaim the previous engine's cycles once the
requests that still hold it have finished (a later swap's thaw reclaims whatever was frozen
while they still ran). A first engine needs no thaw: nothing was frozen before it, except in a
process that ran other apps before (tests), which then need not walk their heap again.
"""

import gc
import logging
import time

logger = logging.getLogger(__name__)


def freeze_heap(*, thaw: bool) -> None:
    """Collect what is garbage now, then freeze every object still tracked. Without `thaw` the
    collection walks only what was made since the last freeze (a first engine: in a fresh
    process, everything); with it, what was frozen too (a swap: the previous engine). Holds the
    GIL for that one collection."""
    began = time.perf_counter()
    if thaw:
        gc.unfreeze()
    gc.collect()
    gc.freeze()
    logger.info(
        "froze %d objects out of the garbage collector's sight in %.0f ms",
        gc.get_freeze_count(),
        (time.perf_counter() - began) * 1000,
    )
