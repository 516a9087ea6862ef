"""Fixtures shared across the test directories: the three runtimes' facades
(``tests/runtimes.py``: ``runtime``, ``loop_runtime`` and the ``recorder`` they report to),
the real servers the tests start themselves, once per run (a PostgreSQL server,
``tests/postgres_server.py``; a Temporal dev server, ``tests/temporal/server.py``), and a
PostgreSQL schema per test. A server that cannot start fails the tests that need it, never
skips them."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any, TypeVar

import pytest

from tests.postgres_server import PostgresServer
from tests.postgres_server import ServerUnavailable as PostgresUnavailable
from tests.runtimes import LOOP_RUNTIMES, RUNTIMES, Recorder
from tests.temporal.server import ServerUnavailable as TemporalUnavailable
from tests.temporal.server import TemporalServer

_Server = TypeVar("_Server", PostgresServer, TemporalServer)


def _serve(server: _Server, unavailable: type[Exception], name: str) -> Iterator[_Server]:
    """Start ``server`` for the run and stop it at the end; ``unavailable`` (its start's
    error) fails the test that needs it."""
    problem = None
    try:
        server.start()
    except unavailable as exc:
        problem = str(exc)
    if problem is not None:
        server.stop()
        pytest.fail(f"the {name} test server is unavailable: {problem}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def recorder() -> Recorder:
    """What the runtime facades saw, for the token checks."""
    return Recorder()


@pytest.fixture(params=sorted(RUNTIMES))
def runtime(request: pytest.FixtureRequest, recorder: Recorder) -> Any:
    """Each runtime's facade in turn: asyncio, the blocking adapter, trio."""
    return RUNTIMES[request.param](recorder)


@pytest.fixture(params=LOOP_RUNTIMES)
def loop_runtime(request: pytest.FixtureRequest, recorder: Recorder) -> Any:
    """An event-loop runtime's facade (asyncio, trio): for what the blocking adapter does
    another way."""
    return RUNTIMES[request.param](recorder)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[PostgresServer]:
    """One PostgreSQL server for the whole run."""
    yield from _serve(PostgresServer(), PostgresUnavailable, "PostgreSQL")


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[TemporalServer]:
    """One Temporal dev server for the whole run."""
    yield from _serve(TemporalServer(), TemporalUnavailable, "Temporal")


@pytest.fixture
def pg_schema(postgres_server: PostgresServer) -> Iterator[str]:
    """A PostgreSQL schema name of the test's own (dropped at the end)."""
    name = f"test_{uuid.uuid4().hex[:12]}"
    yield name
    postgres_server.drop_schema(name)


@pytest.fixture(autouse=True)
def _cli_state_in_tmp(
    tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``coder-agent``'s local chat log and the Coder CLI's stored login are looked up in
    folders of the test's own, never the user's: every test (and the programs it starts)
    sees an empty ``$XDG_DATA_HOME`` and ``$CODER_CONFIG_DIR``."""
    home = tmp_path_factory.mktemp("cli-state")
    monkeypatch.setenv("XDG_DATA_HOME", str(home / "data"))
    monkeypatch.setenv("CODER_CONFIG_DIR", str(home / "coderv2"))
