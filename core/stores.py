"""The bundle store the settings name: a shared directory, or S3-compatible object storage."""

from core.registry import BundleStore
from core.settings import Settings


def open_store(settings: Settings) -> BundleStore:
    """`RANKSERVE_STORE_URL=s3://bucket/prefix`: bundles in the bucket, `store_dir` the local
    cache (core/s3_store.py); unset: the directory `store_dir` that every process shares.

    Both are ModelStore (core/registry.py) and BundleStore, so every existing caller of
    BundleStore works with either.
    """
    if settings.store_url is None:
        return BundleStore(settings.bundle_store)
    # Only an S3 deployment needs boto3 (the `s3` extra).
    from core.s3_store import S3BundleStore

    return S3BundleStore.from_settings(settings)
