"""`python -m tests.core.restore_child PREFIX FILE LOCK_TTL_S DELAY_S`: restore a corpus file
into the store under PREFIX exactly as the service's restore does (core/corpus_restore.py), in
a process of its own, for test_corpus_restore.py to SIGKILL midway. DELAY_S is slept after
each batch read from the file, so that the kill can land while the restore is staging."""

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path

from core.corpus_files import open_corpus, read_documents
from core.corpus_restore import restore_corpus
from core.documents import DocumentStore, NewDocument
from core.redis_clients import async_redis
from core.redis_keys import RedisKeys
from core.settings import Settings


def slowed(documents: Iterator[NewDocument], delay_s: float) -> Iterator[NewDocument]:
    for k, doc in enumerate(documents, start=1):
        yield doc
        if k % 500 == 0:
            time.sleep(delay_s)


async def main(prefix: str, path: Path, lock_ttl_s: float, delay_s: float) -> None:
    store = DocumentStore(async_redis(Settings(), decode_responses=True), RedisKeys(prefix))
    with open_corpus(path, "r") as handle:
        result = await restore_corpus(
            store,
            slowed(read_documents(handle, sorted_ids=True), delay_s),
            name="child",
            changes_keep=10,
            lock_ttl_s=lock_ttl_s,
        )
    print(result, flush=True)


if __name__ == "__main__":
    prefix, file, ttl, delay = sys.argv[1:5]
    asyncio.run(main(prefix, Path(file), float(ttl), float(delay)))
