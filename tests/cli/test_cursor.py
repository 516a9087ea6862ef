"""Regression: a bogus ``--last-seen-message-id`` (beyond the chat's last message) was echoed
back as the new cursor. The server skips nothing past its last message, so such a cursor is
refused up front with one line, and the cursor printed after a run is one the server sent."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator

import pytest

from coder_integrations.fake_server import FakeCoderServer

from .terminal import CLI, environment


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.001) as server:
        yield server


def _cli(server: FakeCoderServer, *argv: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    env = environment(
        CODER_URL=server.url,
        CODER_SESSION_TOKEN=server.token,
        CODER_ORGANIZATION_ID=server.organization_id,
    )
    return subprocess.run(
        [*CLI, *argv], env=env, input=stdin, capture_output=True, text=True, timeout=120
    )


def test_a_cursor_beyond_the_last_message_is_refused(server: FakeCoderServer) -> None:
    first = _cli(server, "run", "--json", "remember the number 7")
    assert first.returncode == 0, first.stderr
    body = json.loads(first.stdout)
    chat_id, cursor = body["chat_id"], body["last_seen_message_id"]
    newest = max(m.id for m in server.model.chats[chat_id].messages)
    assert cursor == newest
    sent = server.counters.requests["create_chat_message"]

    bogus = _cli(server, "run", "--chat-id", chat_id, "--last-seen-message-id", "99999", "hi")
    assert bogus.returncode == 2 and "Traceback" not in bogus.stderr
    (line,) = bogus.stderr.strip().splitlines()
    assert line == (
        f"coder-agent run: --last-seen-message-id 99999 is beyond the last message of chat "
        f"{chat_id} ({newest}); pass the cursor a previous run printed"
    )
    assert "99999" not in bogus.stdout
    as_json = _cli(
        server, "run", "--json", "--chat-id", chat_id, "--last-seen-message-id", "99999", "hi"
    )
    reply = json.loads(as_json.stdout)
    assert as_json.returncode == 2 and reply["error_kind"] == "usage"
    assert reply["last_seen_message_id"] != 99999
    in_chat = _cli(server, "chat", "--chat-id", chat_id, "--last-seen-message-id", "99999")
    assert in_chat.returncode == 2 and "beyond the last message" in in_chat.stderr
    # Nothing was sent on the chat.
    assert server.counters.requests["create_chat_message"] == sent

    # The cursor the server sent continues the chat, and the next one printed is the server's.
    good = _cli(
        server, "run", "--json", "--chat-id", chat_id, "--last-seen-message-id", str(cursor), "hi"
    )
    assert good.returncode == 0, good.stderr
    after = json.loads(good.stdout)["last_seen_message_id"]
    assert after == max(m.id for m in server.model.chats[chat_id].messages) and after > cursor
