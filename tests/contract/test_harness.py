"""The contract harness reaches the served fake under ``/api/v2`` with the session token."""

from __future__ import annotations

from .conftest import CHATS, Contract


def test_a_created_chat_is_listed(api: Contract) -> None:
    chat = api.create_chat("hello")
    listed = api.request("GET", CHATS).json()
    assert chat["id"] in [entry["id"] for entry in listed]
