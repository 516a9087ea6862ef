"""Contract cases from the server's ``coderd/exp_chats_queue_edit_test.go``: the guards of
``PATCH /chats/{chat}/queue/{id}``.

This version of the server's test marks an entry with ``held`` (shown as ``held_at``) and
reads a body from the edit route. The newest server names the flag ``editing`` (shown as
``editing_since``) and answers the edit with an empty 204, which is what the fake serves, so
where the server's test sends ``held: true`` the case below sends ``editing: true``; the
messages it checks are the same on both versions.

Top-level server tests: 1 (``TestPatchChatQueuedMessage``, 3 subtests); 1 subtest restated,
2 not restated. In the restated one, the 403 for another user of the organization is left
out: the fake serves one user.

Not restated:

- TestPatchChatQueuedMessage/HoldThenReleaseOnErroredChat: asserts the ``held_at`` field and
  the edit route's response body, which the newest server replaced (``editing_since``, an
  empty 204).
- TestPatchChatQueuedMessage/ReleaseFromWaitingPromotes: needs a waiting chat with a held
  queue head, written to the database; on the newest server that chat is ``paused``, a state
  the server reaches only at a turn boundary.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto.fake import Fail, Script, Wait

from .conftest import CHATS, Contract

#: A prompt whose turn fails after a moment: time enough to queue a message behind it.
FAILS = "fail soon"


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0) as served:
        served.config.scripts.add(FAILS, Script((Wait(0.5), Fail(message="boom"))))
        yield served


def _errored_with_queue(api: Contract, text: str) -> tuple[str, int]:
    """A chat in ``error`` with one queued message (``text``): its id and the entry's."""
    chat = api.create_chat(FAILS)
    body = {"content": [{"type": "text", "text": text}], "busy_behavior": "queue"}
    sent = api.request("POST", f"{CHATS}/{chat['id']}/messages", body)
    assert sent.status_code == 200, sent.text
    assert sent.json()["queued"] is True
    deadline = time.monotonic() + 10
    while api.request("GET", f"{CHATS}/{chat['id']}").json()["status"] != "error":
        assert time.monotonic() < deadline, "the chat never failed"
        time.sleep(0.01)
    return chat["id"], int(sent.json()["queued_message"]["id"])


def _edit(api: Contract, chat_id: str, queued_id: Any, body: Any) -> tuple[int, str]:
    answer = api.request("PATCH", f"{CHATS}/{chat_id}/queue/{queued_id}", body)
    return answer.status_code, answer.json()["message"]


def test_patch_chat_queued_message__guards(api: Contract) -> None:
    """TestPatchChatQueuedMessage/Guards: an empty edit, empty content, an id that is not an
    integer and an archived chat are each refused with the server's 400."""
    chat_id, queued_id = _errored_with_queue(api, "original")
    assert _edit(api, chat_id, queued_id, {}) == (400, "Nothing to edit.")
    assert _edit(api, chat_id, queued_id, {"content": []}) == (400, "Content is required.")
    assert _edit(api, chat_id, "not-an-int", {"editing": True}) == (
        400,
        "Invalid queued message ID.",
    )

    archived_id, archived_queued = _errored_with_queue(api, "original")
    answer = api.request("PATCH", f"{CHATS}/{archived_id}", {"archived": True})
    assert answer.status_code == 204, answer.text
    assert _edit(api, archived_id, archived_queued, {"editing": True}) == (
        400,
        "Cannot edit queued messages in an archived chat.",
    )
