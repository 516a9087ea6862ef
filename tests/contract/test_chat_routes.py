"""Contract cases from the server's ``coderd/chat_routes_test.go``: where the chat routes are
mounted.

The server version of this test serves the chat routes under both ``/api/experimental`` and
``/api/v2`` (the compatibility window), so the case runs against the fake's profile of such a
server (``experimental_mount=True``).

Top-level server tests: 1, restated; of its routes, the two reads of
``/chats/config/system-prompt`` (200 on the server) are left out: the fake serves no
deployment configuration routes.

Not restated: none.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coder_integrations.fake_server import FakeCoderServer

from .conftest import Contract


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0, experimental_mount=True) as served:
        yield served


def test_chat_routes_compatibility(api: Contract) -> None:
    """TestChatRoutesCompatibility: the chat list answers 200 under both prefixes; the
    configuration, provider, debug, desktop and MCP routes that moved out of the chat API
    answer 404 under ``/api/v2``."""
    chat = api.create_chat("routes")
    for path in ("/api/experimental/chats", "/api/v2/chats"):
        answer = api.request("GET", path)
        assert answer.status_code == 200, path
    gone = [
        ("GET", "/api/v2/chats/model-configs"),
        ("POST", "/api/v2/chats/model-configs"),
        ("GET", "/api/v2/chats/providers"),
        ("GET", "/api/v2/chats/user-provider-configs"),
        ("GET", "/api/v2/chats/config/computer-use-provider"),
        ("GET", "/api/v2/chats/config/advisor"),
        ("GET", f"/api/v2/chats/{chat['id']}/debug/runs"),
        ("GET", f"/api/v2/chats/{chat['id']}/stream/desktop"),
        ("GET", "/api/v2/mcp/servers/not-a-uuid/oauth2/callback"),
        ("POST", "/api/v2/mcp/http/server"),
    ]
    for method, path in gone:
        answer = api.request(method, path)
        assert answer.status_code == 404, f"{method} {path}: {answer.status_code}"
