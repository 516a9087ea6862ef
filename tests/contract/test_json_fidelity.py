"""Contract cases from the server's wire types and handlers rather than from one of its tests:
the fields its JSON always carries, and the words of its queue conflicts.

- ``codersdk/chats.go``: the ``Chat`` fields whose Go tags have no ``omitempty`` are always
  in the JSON, ``null`` when unset (``last_turn_summary``, ``summary``), and the collections
  are always there (``mcp_server_ids``, ``labels``, ``children``). ``ChatMessage`` and
  ``ChatQueuedMessage`` tag every optional field ``omitempty`` in the version read, so an
  unset one is left out rather than sent as ``null``; the client reads both forms alike.
- ``coderd/exp_chats.go``: deleting or promoting from an empty queue, and reconciling a chat
  whose state is valid, are the state machine's refusals: a 409 whose ``message`` names the
  route and whose ``detail`` is the refused transition ("chat state transition
  DeleteQueuedMessage not allowed from state R0").
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto._wire.messages import ChatMessage, ChatQueuedMessage
from coder_proto.fake import Script, Wait

from .conftest import CHATS, Contract

#: A prompt whose turn does not end while a test runs: the chat stays ``running``.
BUSY = "stay busy"


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0) as served:
        served.config.scripts.add(BUSY, Script((Wait(60.0),)))
        yield served


def test_chat_always_carries_its_nullable_fields(api: Contract) -> None:
    """A chat's JSON has ``last_turn_summary`` and ``summary`` present and ``null`` before any
    summary exists, on create, get and list alike, and its collections present."""
    created = api.create_chat(BUSY)
    fetched = api.request("GET", f"{CHATS}/{created['id']}").json()
    (listed,) = api.request("GET", CHATS).json()
    for chat in (created, fetched, listed):
        for field in ("last_turn_summary", "summary"):
            assert field in chat and chat[field] is None, (field, chat)
        assert chat["mcp_server_ids"] == []
        assert chat["labels"] == {}
        assert chat["children"] == []


def test_queued_and_history_entries_read_the_same_with_nulls(api: Contract) -> None:
    """An entry as the fake sends it and the same entry with every optional field an explicit
    ``null`` parse to the same value."""
    chat = api.create_chat(BUSY)
    body = {"content": [{"type": "text", "text": "later"}], "busy_behavior": "queue"}
    sent = api.request("POST", f"{CHATS}/{chat['id']}/messages", body).json()
    entry = sent["queued_message"]
    nulls = {"model_config_id": None, "reasoning_effort": None, "editing_since": None}
    assert ChatQueuedMessage.from_json({**entry, **nulls}) == ChatQueuedMessage.from_json(
        {k: v for k, v in entry.items() if k not in nulls}
    )
    (message,) = api.request("GET", f"{CHATS}/{chat['id']}/messages").json()["messages"]
    nulls = {"created_by": None, "model_config_id": None, "usage": None}
    nulls["queued_message_id"] = None
    assert ChatMessage.from_json({**message, **nulls}) == ChatMessage.from_json(
        {k: v for k, v in message.items() if k not in nulls}
    )


@pytest.mark.parametrize(
    ("method", "suffix", "message", "transition"),
    [
        ("DELETE", "", "Chat has no queued messages to delete.", "DeleteQueuedMessage"),
        ("POST", "/promote", "Chat has no queued messages to promote.", "PromoteQueuedMessage"),
    ],
)
def test_empty_queue_conflicts_name_the_refused_transition(
    api: Contract, method: str, suffix: str, message: str, transition: str
) -> None:
    """Deleting or promoting from the empty queue of a running chat is the server's 409, with
    the state machine's refusal in ``detail``."""
    chat = api.create_chat(BUSY)
    answer = api.request(method, f"{CHATS}/{chat['id']}/queue/1{suffix}")
    assert answer.status_code == 409, answer.text
    assert answer.json()["message"] == message
    assert answer.json()["detail"] == (
        f"chat state transition {transition} not allowed from state R0"
    )


def test_reconcile_conflict_names_the_refused_transition(api: Contract) -> None:
    """Reconciling a running chat, whose state is valid, is the server's 409 with the state
    machine's refusal in ``detail``."""
    chat = api.create_chat(BUSY)
    answer = api.request("POST", f"{CHATS}/{chat['id']}/reconcile-invalid")
    assert answer.status_code == 409, answer.text
    assert answer.json()["message"] == "Chat is not in an invalid state."
    assert answer.json()["detail"] == (
        "chat state transition ReconcileInvalidState not allowed from state R0"
    )
