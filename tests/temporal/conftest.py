"""Fixtures of the Temporal tests: one Temporal dev server for the run, started by the tests
themselves (``tests/temporal/server.py``); a server that cannot start fails the tests that
need it, never skips them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .server import ServerUnavailable, TemporalServer


@pytest.fixture(scope="session")
def temporal_server() -> Iterator[TemporalServer]:
    """One Temporal dev server for the whole run (stopped at the end)."""
    server = TemporalServer()
    problem = None
    try:
        server.start()
    except ServerUnavailable as exc:
        problem = str(exc)
    if problem is not None:
        server.stop()
        pytest.fail(f"the Temporal test server is unavailable: {problem}", pytrace=False)
    try:
        yield server
    finally:
        server.stop()
