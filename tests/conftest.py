"""Fixtures shared across the test directories: a real PostgreSQL server started by the tests
themselves (``tests/stores/postgres_server.py``), once per run, and a schema per test."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import pytest

from tests.stores.postgres_server import PostgresServer, ServerUnavailable


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole run. It fails the tests that need it when it
    cannot start (never a skip)."""
    server = PostgresServer()
    problem = None
    try:
        server.start()
    except ServerUnavailable as exc:
        problem = str(exc)
    if problem is not None:
        server.stop()
        pytest.fail(f"the PostgreSQL test server is unavailable: {problem}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def pg_schema(postgres_server: PostgresServer) -> Iterator[str]:
    """A PostgreSQL schema name of the test's own (dropped at the end)."""
    name = f"test_{uuid.uuid4().hex[:12]}"
    yield name
    postgres_server.drop_schema(name)
