"""The thread that keeps a rank store's pages from going cold (models/page_warmer.py): what it
reads, how often, and that it ends with its store."""

import gc
import threading
import time

import numpy as np
import pytest
import torch

from models import page_warmer
from models.page_warmer import PAGE_BYTES, PageWarmer, touch
from models.rank_store import RankStore
from tests.polling import wait_until


def warmers(name: str) -> list[threading.Thread]:
    """Live warmer threads of this name (other tests' stores may have their own)."""
    return [t for t in threading.enumerate() if t.name == f"warm-{name}"]


def test_touch_reads_the_first_byte_of_every_page(monkeypatch: pytest.MonkeyPatch) -> None:
    # Reads of 4 pages: the real 1024 would need gigabytes here, each page faulted in whole
    # where the host backs memory with huge pages.
    monkeypatch.setattr(page_warmer, "_PAGES_PER_READ", 4)
    pages = 10  # more than one read's worth of pages, and a partial last one
    memory = np.zeros(pages * PAGE_BYTES // 8 + 3, dtype=np.float64)  # not bytes: viewed as such
    as_bytes = memory.view(np.uint8)
    as_bytes[::PAGE_BYTES] = np.arange(pages + 1) % 251  # the first byte of each page
    as_bytes[1::PAGE_BYTES] = 7  # any other byte is left unread
    assert touch(memory) == int((np.arange(pages + 1) % 251).sum())


def test_the_warmer_reads_every_period_until_stopped() -> None:
    reads: list[int] = []
    memory = np.ones(3 * PAGE_BYTES, dtype=np.uint8)

    def give() -> np.ndarray:
        reads.append(len(reads))
        return memory

    warmer = PageWarmer("test", 0.01, give)
    wait_until(lambda: len(reads) >= 3)
    warmer.stop()
    wait_until(lambda: not warmers("test"))
    count = len(reads)
    time.sleep(0.05)
    assert len(reads) == count


def test_the_warmer_ends_when_its_memory_is_gone() -> None:
    PageWarmer("gone", 0.01, lambda: None)
    wait_until(lambda: not warmers("gone"))


def test_the_period_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        PageWarmer("never", 0.0, lambda: None)


def test_a_store_keeps_warm_only_while_it_lives() -> None:
    anchors = torch.nn.functional.normalize(torch.randn(64, 8, generator=torch.manual_seed(0)))
    closed = RankStore(anchors, "closed", 8, 1 << 20, keep_warm_s=0.01)
    assert len(warmers(closed.key)) == 1
    closed.close()
    wait_until(lambda: not warmers(closed.key))

    dropped = RankStore(anchors, "dropped", 8, 1 << 20, keep_warm_s=0.01)
    dropped.put([5, 9], dropped.encode_embeddings(anchors[:2]))
    assert dropped.written.shape == (2, dropped.codec.row_bytes)
    key = dropped.key
    assert len(warmers(key)) == 1
    del dropped
    gc.collect()
    # The thread held no reference: the store went, and the thread with it.
    wait_until(lambda: not warmers(key))

    cold = RankStore(anchors, "cold", 8, 1 << 20)
    assert not warmers(cold.key)
