"""S3-compatible object storage: bucket and prefix from a URL, a client configured from the
settings (checksum behaviour that MinIO and Ceph accept), and which errors mean "the store did
not answer"."""

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlparse

import boto3
from boto3.exceptions import S3UploadFailedError
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from core.bundle_manifest import BundleStoreUnavailableError
from core.settings import Settings

NOT_FOUND = frozenset({"404", "NoSuchKey", "NotFound"})

# What a request that the store did not serve raises (connection, timeout, torn stream, an
# error answer); anything else, such as a full local disk, is not the store's and propagates.
S3_ERRORS = (BotoCoreError, ClientError, S3UploadFailedError)


@dataclass(frozen=True)
class S3Location:
    """`s3://bucket/prefix` split; `prefix` is empty or ends with one slash."""

    bucket: str
    prefix: str

    @classmethod
    def parse(cls, url: str) -> "S3Location":
        parsed = urlparse(url)
        if parsed.scheme != "s3" or not parsed.netloc or parsed.query or parsed.fragment:
            raise ValueError(f"not an s3://bucket/prefix URL: {url!r}")
        prefix = parsed.path.strip("/")
        return cls(parsed.netloc, f"{prefix}/" if prefix else "")

    def key(self, *parts: str) -> str:
        return self.prefix + "/".join(parts)

    def url(self, *parts: str) -> str:
        return f"s3://{self.bucket}/{self.key(*parts)}"


def s3_client(settings: Settings) -> Any:
    """A boto3 S3 client as the settings describe it (endpoint, region, addressing, checksums)."""
    config = Config(
        request_checksum_calculation=settings.s3_checksums,
        response_checksum_validation=settings.s3_checksums,
        s3={"addressing_style": settings.s3_addressing_style},
        retries={"max_attempts": 5, "mode": "standard"},
        connect_timeout=10,
        read_timeout=120,
    )
    # A session of its own: boto3's default session is not thread-safe to create clients from.
    return boto3.session.Session().client(
        "s3",
        endpoint_url=settings.s3_endpoint_url,
        region_name=settings.s3_region,
        config=config,
    )


def error_code(error: Exception) -> str | None:
    response = getattr(error, "response", None)
    if isinstance(response, dict):
        return str(response.get("Error", {}).get("Code", "")) or None
    return None


def is_not_found(error: Exception) -> bool:
    return error_code(error) in NOT_FOUND


def unavailable(error: Exception, what: str) -> BundleStoreUnavailableError:
    code = error_code(error)
    reason = f"{code}: {error}" if code else f"{type(error).__name__}: {error}"
    return BundleStoreUnavailableError(f"object storage did not answer {what} ({reason})")
