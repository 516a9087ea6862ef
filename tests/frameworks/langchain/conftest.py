"""The fake Coder server the LangChain tests drive, one per module, over loopback."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_integrations.pytest_plugin import FakeCoder
from coder_io_asyncio.integrations.langchain import ChatCoder


@pytest.fixture(scope="module")
def coder_server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.0) as server:
        yield server


@pytest.fixture
def anyio_backend() -> str:
    """LangChain's async entry points are asyncio's."""
    return "asyncio"


@pytest.fixture
def fake(coder_server: FakeCoderServer) -> FakeCoder:
    """The module's fake server through the plugin's handle (a module may add scripts)."""
    return FakeCoder(coder_server)


@pytest.fixture
def model(coder_server: FakeCoderServer, fake: FakeCoder) -> Iterator[ChatCoder]:
    """A ``ChatCoder`` on the module's fake server (after its scripts), closed after the test."""
    model = ChatCoder(
        base_url=coder_server.url,
        api_key=coder_server.token,
        organization_id=coder_server.organization_id,
    )
    yield model
    model.close()
