"""The batcher's wait, after a batch, for the clients it has just answered
(service/batching.py says why): which texts the next batch waits for, until when, and the
back-off after waits in vain. Bookkeeping only; the caller passes the clock in."""

from dataclasses import dataclass
from typing import Literal

# The longest wait for answered clients, as a share of the batch just encoded: its worst cost in
# throughput where they do not come back. Sixteen one-text clients came back within it on a
# 2-core AMD EPYC Zen 4, with the server and the clients on the same cores (docs/api.md).
SHARE = 0.3
# After the n-th wait in vain in a row, no wait after the next BACKOFF[n] batches (the last
# entry from then on); a wait that fills up resets n.
BACKOFF = (1, 2, 4, 8, 16, 32)

Outcome = Literal["back", "in_vain"]


@dataclass
class RejoinWait:
    max_s: float  # the longest wait; 0: never wait
    max_texts: int  # a batch's most texts: never wait for more
    expected: int = 0  # texts the next batch waits for (those queued and the answered ones)
    until: float = 0.0  # when it stops waiting for them
    misses: int = 0  # waits in vain in a row
    skips: int = 0  # batches after which not to wait

    def after_batch(self, answered: int, queued: int, encoding_s: float, now: float) -> None:
        """A batch of `answered` texts, `encoding_s` long, has ended with `queued` texts
        waiting: expect the answered clients back, unless backing off."""
        if self.skips:
            self.skips -= 1
            return
        window = min(self.max_s, SHARE * encoding_s)
        if window > 0:
            self.expected = min(queued + answered, self.max_texts)
            self.until = now + window

    def waits(self, queued: int) -> bool:
        """Whether, with `queued` texts waiting, the next batch waits (until `until`)."""
        return queued < self.expected

    def settle(self, queued: int) -> Outcome:
        """The next batch leaves, after waiting, with `queued` texts: whether the clients came
        back, and the back-off that follows."""
        back = queued >= self.expected
        self.expected = 0
        if back:
            self.misses = 0
            return "back"
        self.skips = BACKOFF[min(self.misses, len(BACKOFF) - 1)]
        self.misses += 1
        return "in_vain"

    def forget(self) -> None:
        """The next batch leaves without having waited: expect nobody after it."""
        self.expected = 0
