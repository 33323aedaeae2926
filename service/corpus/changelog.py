"""Trimming the change log (<prefix>:corpus:changes) to what live replicas still need.

Every replica runs one ChangeLogTrimmer. Each round it records its follower's position (the
oldest revision after which it may still read the log: `IndexFollower.retained_revision`)
for three rounds' time, and trims the log below the oldest position any live replica
recorded (core/documents.py `trim_changes`, one Lua script, so concurrent trimmers agree).

Who needs what:
- a replica following the log: entries after its applied revision (and the entry at it, which
  it checks to notice a log rewritten by a failover);
- a replica building a hot swap's index: entries after the revision the build started from;
  the follower reports the older of the two;
- a replica starting: nothing old. It builds from a full scan and follows from the revision
  read before the scan; until then it records 0 and holds everything back;
- a stored bundle: nothing. A swap reuses the bundle's embeddings of the documents whose own
  revision (in their hash) is at or before the bundle's, re-embeds the others, and replays the
  log only from where its own scan started, so no bundle pins the log.

A replica that stops recording (dead, or cut off from Redis for three rounds) stops holding
the log back. If it comes back to find its position trimmed, its follower gets
ChangeLogGapError and rebuilds from a full scan: trimming never makes an index wrong, at
worst it costs that replica a rebuild.
"""

import asyncio
import logging
import os
import socket
import uuid

from core.documents import DocumentStore, StoreUnavailableError
from core.settings import Settings
from service.corpus.follower import IndexFollower

logger = logging.getLogger(__name__)

_ROUNDS_ALIVE = 3  # a reader's position lapses after this many missed rounds


class ChangeLogTrimmer:
    def __init__(self, settings: Settings, store: DocumentStore, follower: IndexFollower) -> None:
        self.store = store
        self.follower = follower
        self.interval_s = settings.changes_trim_interval_s
        self.keep = settings.changes_keep
        # Unique per process and app: several apps in one process (tests, uvicorn workers with
        # a reused pid) must not overwrite each other's positions.
        self.reader = f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.oldest: int | None = None  # the oldest position seen in the last round

    async def run(self) -> None:
        """Until cancelled; the first round runs at once, before the follower's first build
        reads its starting revision, so a starting replica holds the log back from the start."""
        while True:
            await self.trim_once()
            await asyncio.sleep(self.interval_s)

    async def trim_once(self) -> None:
        try:
            self.oldest = await self.store.trim_changes(
                self.reader,
                self.follower.retained_revision,
                _ROUNDS_ALIVE * self.interval_s,
                self.keep,
            )
        except StoreUnavailableError as error:
            # The follower reports the outage; trimming simply waits for the next round.
            logger.debug("change log trim skipped: %s", error.__cause__)
