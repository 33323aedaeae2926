"""Every Redis key rankserve uses, in one place, under one configurable prefix.

Several API replicas and the worker share one Redis; two deployments (or two test runs) share
it safely by using different prefixes. Add new keys here, never as string literals elsewhere.
"""

from dataclasses import dataclass


@dataclass(frozen=True)
class RedisKeys:
    prefix: str = "rankserve"

    # Document corpus (core/documents.py). Redis is its source of truth.
    def document(self, doc_id: str) -> str:
        """Hash: text, metadata (JSON object), number (the index id), revision (last write)."""
        return f"{self.prefix}:document:{doc_id}"

    @property
    def document_ids(self) -> str:
        """Sorted set of every live document id, all scores 0: lexicographic cursor listing."""
        return f"{self.prefix}:documents"

    @property
    def document_numbers(self) -> str:
        """Hash id -> int64 number used as the faiss id; assigned once per id, never reused."""
        return f"{self.prefix}:document-numbers"

    @property
    def document_number_counter(self) -> str:
        return f"{self.prefix}:document-number"

    @property
    def corpus_revision(self) -> str:
        """Counter: the revision of the last change; 0 (absent) for a corpus never written."""
        return f"{self.prefix}:corpus:revision"

    @property
    def corpus_changes(self) -> str:
        """Stream of changes, entry id "<revision>-0", fields op (upsert|delete), id, number."""
        return f"{self.prefix}:corpus:changes"

    @property
    def corpus_readers(self) -> str:
        """Sorted set reader -> the oldest revision it still needs from the change log; the
        stream is trimmed to the lowest (core/documents.py trim_changes)."""
        return f"{self.prefix}:corpus:readers"

    @property
    def corpus_reader_deadlines(self) -> str:
        """Sorted set reader -> when (ms since the epoch) its entry in corpus_readers lapses,
        so a replica that died stops holding the change log back."""
        return f"{self.prefix}:corpus:reader-deadlines"

    @property
    def demo_seeded(self) -> str:
        """Set once the first start decided about the demo corpus, so it is never re-added."""
        return f"{self.prefix}:corpus:demo-seeded"

    # Corpus restores (core/corpus_restore.py): a snapshot is staged under keys of its own,
    # then switched in by one script, so a restore that dies leaves the corpus as it was.
    @property
    def restore_lock(self) -> str:
        """String with a TTL: the token of the one restore that may switch the corpus."""
        return f"{self.prefix}:corpus:restore-lock"

    @property
    def last_restore(self) -> str:
        """Hash: snapshot, revision (the corpus revision right after it), at, of the last
        restore."""
        return f"{self.prefix}:corpus:last-restore"

    def restore_texts(self, token: str) -> str:
        """Hash id -> text of the snapshot one restore stages; expires unless renewed."""
        return f"{self.prefix}:restore:{token}:texts"

    def restore_metadata(self, token: str) -> str:
        """Hash id -> metadata (compact JSON) of the staged snapshot; expires like the texts."""
        return f"{self.prefix}:restore:{token}:metadata"

    def restore_apply(self, token: str) -> str:
        """Sorted set of the ids whose live state differed from the staged one when compared."""
        return f"{self.prefix}:restore:{token}:apply"

    @property
    def restore_pattern(self) -> str:
        """SCAN MATCH pattern of every restore's staging keys."""
        return f"{self.prefix}:restore:*"

    def document_anchors(self, count: int, seed: int) -> str:
        """Hash: the anchor texts sampled from the documents for (count, seed), and checksum."""
        return f"{self.prefix}:anchors:documents:m{count}:s{seed}"

    # Model versions and retraining (worker/, service/swap.py, /admin).
    @property
    def active_version(self) -> str:
        """String: the bundle version every replica should serve; absent = the settings model."""
        return f"{self.prefix}:model:active"

    @property
    def model_notices(self) -> str:
        """Pub/sub channel: JSON {"version", "reason"} after each change of the active key."""
        return f"{self.prefix}:model:notices"

    @property
    def model_history(self) -> str:
        """List, newest first: JSON {"version", "previous", "reason", "at"} per activation."""
        return f"{self.prefix}:model:history"

    @property
    def last_loaded(self) -> str:
        """String: the last version some replica loaded and served. A replica that cannot load
        the active version at start serves this one, never an older default."""
        return f"{self.prefix}:model:last-loaded"

    @property
    def refused_bundles(self) -> str:
        """Hash version -> JSON {"error", "replica", "at"}: bundles a replica refused to load."""
        return f"{self.prefix}:model:refused"

    def replica(self, replica_id: str) -> str:
        """String with a TTL: JSON {"version", "loading", "error", "at"} that a replica reports."""
        return f"{self.prefix}:replica:{replica_id}"

    @property
    def replica_pattern(self) -> str:
        return f"{self.prefix}:replica:*"

    @property
    def retrain_queue(self) -> str:
        """The RQ queue name. RQ keeps its own keys (rq:queue:<name>, rq:job:<id>, rq:wip:<name>,
        rq:failed:<name>, ...) outside this prefix; the queue name carries the prefix instead."""
        return f"{self.prefix}:retrain"

    @property
    def pattern(self) -> str:
        """SCAN MATCH pattern covering every key above (tests use it to clean up)."""
        return f"{self.prefix}:*"
