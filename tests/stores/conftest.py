"""Fixtures of the store conformance suite: a real PostgreSQL server for the session, a
PostgreSQL schema per test, and ``store``: the same test body on every store (``kinds``)."""

from __future__ import annotations

import pathlib
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

# The runtime facades of tests/integration, for the workflow scenarios on every runtime.
from tests.integration.conftest import make_server, recorder, runtime  # noqa: F401

from .kinds import KINDS, SHARED_KINDS, StoreMaker
from .postgres_server import PostgresServer, ServerUnavailable


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole run. It fails the tests that need it when it
    cannot start (never a skip)."""
    server = PostgresServer()
    try:
        server.start()
    except ServerUnavailable as exc:
        server.stop()
        pytest.fail(f"the PostgreSQL test server is unavailable: {exc}", pytrace=False)
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


@pytest.fixture(params=KINDS)
def maker(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[StoreMaker]:
    made = StoreMaker(request.param, tmp_path, request)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def store(maker: StoreMaker) -> Any:
    """A fresh, empty store of each kind."""
    return maker.open()


@pytest.fixture(params=SHARED_KINDS)
def shared_maker(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[StoreMaker]:
    made = StoreMaker(request.param, tmp_path, request)
    try:
        yield made
    finally:
        made.close()
