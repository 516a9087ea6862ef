"""The contract suite: cases restated from the Coder server's own tests of its chat routes.

Each case sends what the server's test sends and asserts what that test asserts (status,
fields, key phrases of the message), against the fake served over loopback under ``/api/v2``.
The module docstring of each file names the server test file it restates, and each case names
the server test it comes from.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from coder_integrations.fake_server import FakeCoderServer

CHATS = "/api/v2/chats"


class Contract:
    """An HTTP client for the served fake, with the session token set."""

    def __init__(self, server: FakeCoderServer, http: httpx.Client) -> None:
        self.server = server
        self.http = http

    def request(self, method: str, path: str, body: Any = None, **kwargs: Any) -> httpx.Response:
        if body is not None:
            kwargs["json"] = body
        return self.http.request(method, path, **kwargs)

    def create_chat(self, text: str = "hello", **fields: Any) -> dict[str, Any]:
        body = {
            "organization_id": self.server.organization_id,
            "content": [{"type": "text", "text": text}],
            **fields,
        }
        answer = self.request("POST", CHATS, body)
        assert answer.status_code == 201, answer.text
        return answer.json()  # type: ignore[no-any-return]


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0) as served:
        yield served


@pytest.fixture
def api(server: FakeCoderServer) -> Iterator[Contract]:
    headers = {"Coder-Session-Token": server.token}
    with httpx.Client(base_url=server.url, headers=headers, timeout=30) as http:
        yield Contract(server, http)
