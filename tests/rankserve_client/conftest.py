"""The service's test servers (tests/service/conftest.py), for the client to talk to."""

from tests.service.conftest import _delete_test_redis_keys, engine, server  # noqa: F401
