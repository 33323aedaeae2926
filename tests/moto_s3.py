"""A real S3-compatible HTTP server on loopback (moto's ThreadedMotoServer) for the S3 store.

Nothing is mocked inside the process under test: boto3 speaks HTTP to the server, exactly as
it would to MinIO or Ceph RGW. Keys are accepted whatever they are; they only must be set.
"""

import os
from collections.abc import Iterator
from contextlib import contextmanager

from moto.server import ThreadedMotoServer

CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "rankserve-test",
    "AWS_SECRET_ACCESS_KEY": "rankserve-test-secret",
    "AWS_DEFAULT_REGION": "us-east-1",
}
REGION = "us-east-1"


@contextmanager
def moto_server() -> Iterator[str]:
    """Start the server on a free loopback port; yields its endpoint URL."""
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
    server.start()
    try:
        host, port = server.get_host_and_port()
        yield f"http://{host}:{port}"
    finally:
        server.stop()


@contextmanager
def credentials() -> Iterator[None]:
    """boto3 reads its keys from the environment, as it does in a pod with a Secret."""
    saved = {name: os.environ.get(name) for name in CREDENTIALS}
    os.environ.update(CREDENTIALS)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
