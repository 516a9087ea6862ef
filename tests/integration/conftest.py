"""Fixtures for the integration scenarios: fake servers over loopback (the runtime facades
are ``tests/runtimes.py``'s, from ``tests/conftest.py``), and the token check every scenario gets for free (docs/architecture.md rule 6: the session token appears in
no repr, exception, log record or transport event)."""

from __future__ import annotations

import logging
import traceback
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from tests.runtimes import Recorder

#: Fast fake-server knobs: the scenarios wait on the protocol, never on the fake model.
FAST: dict[str, Any] = {"chunk_delay": 0.0005, "interrupt_delay": 0.05}

MakeServer = Callable[..., FakeCoderServer]


def _record_text(record: logging.LogRecord) -> str:
    text = record.getMessage()
    if record.exc_info:
        text += "".join(traceback.format_exception(*record.exc_info))
    return text


@pytest.fixture
def make_server(recorder: Recorder, caplog: pytest.LogCaptureFixture) -> Iterator[MakeServer]:
    """Start fake servers (each in its own thread) with ``FAST`` knobs plus overrides; stop
    them at the end, then check that no token of theirs leaked anywhere."""
    caplog.set_level(logging.DEBUG)
    servers: list[FakeCoderServer] = []

    def make(**overrides: Any) -> FakeCoderServer:
        server = FakeCoderServer(**{**FAST, **overrides})
        server.start()
        servers.append(server)
        return server

    try:
        yield make
    finally:
        for server in servers:
            server.stop()
    records = [r for when in ("setup", "call") for r in caplog.get_records(when)]
    texts = recorder.texts() + [_record_text(r) for r in [*records, *caplog.records]]
    for server in servers:
        token = server.token
        leaks = [t for t in texts if token in t]
        assert not leaks, f"the session token leaked: {leaks[:3]}"


@pytest.fixture
def server(make_server: MakeServer) -> FakeCoderServer:
    return make_server()
