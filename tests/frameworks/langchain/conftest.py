"""The fake Coder server the LangChain tests drive, one per module, over loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coder_integrations.fake_server import FakeCoderServer


@pytest.fixture(scope="module")
def coder_server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.0) as server:
        yield server


@pytest.fixture
def anyio_backend() -> str:
    """LangChain's async entry points are asyncio's."""
    return "asyncio"
