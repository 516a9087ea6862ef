"""Contract cases from the server's ``coderd/httpapi/chatlabels_test.go``.

The server's test calls its label validator directly; here each case goes through the routes
that run it: creating a chat (``POST /chats``) and updating one (``PATCH /chats/{chat}``). A
valid set is accepted and stored; an invalid one is a 400 "Invalid labels." whose
``validations`` carry the validator's errors, each for the field ``labels``.

Top-level server tests: 1 (``TestValidateChatLabels``, 13 subtests), all restated.

Not restated: none.
"""

from __future__ import annotations

from typing import Any

import httpx

from .conftest import CHATS, Contract


def _create(api: Contract, labels: Any) -> httpx.Response:
    body: dict[str, Any] = {
        "organization_id": api.server.organization_id,
        "content": [{"type": "text", "text": "labels"}],
    }
    if labels is not ...:
        body["labels"] = labels
    return api.request("POST", CHATS, body)


def _accepted(api: Contract, labels: dict[str, str]) -> None:
    """Both routes accept ``labels`` and the chat carries them."""
    created = _create(api, labels)
    assert created.status_code == 201, created.text
    assert created.json()["labels"] == labels
    chat = api.create_chat("relabel")
    updated = api.request("PATCH", f"{CHATS}/{chat['id']}", {"labels": labels})
    assert updated.status_code == 204, updated.text
    assert api.request("GET", f"{CHATS}/{chat['id']}").json()["labels"] == labels


def _refused(api: Contract, labels: dict[str, str]) -> list[dict[str, str]]:
    """Both routes refuse ``labels`` alike; the validation errors of the create route."""
    created = _create(api, labels)
    assert created.status_code == 400, created.text
    assert created.json()["message"] == "Invalid labels."
    validations: list[dict[str, str]] = created.json()["validations"]
    chat = api.create_chat("relabel")
    updated = api.request("PATCH", f"{CHATS}/{chat['id']}", {"labels": labels})
    assert updated.status_code == 400, updated.text
    assert updated.json()["validations"] == validations
    assert api.request("GET", f"{CHATS}/{chat['id']}").json()["labels"] == {}
    return validations


def _details(validations: list[dict[str, str]]) -> list[str]:
    return [entry["detail"] for entry in validations]


def test_validate_chat_labels__nil_map(api: Contract) -> None:
    """TestValidateChatLabels/NilMap: no labels at all is valid."""
    created = _create(api, ...)
    assert created.status_code == 201, created.text
    assert created.json()["labels"] == {}
    created = _create(api, None)
    assert created.status_code == 201, created.text
    assert created.json()["labels"] == {}


def test_validate_chat_labels__empty_map(api: Contract) -> None:
    """TestValidateChatLabels/EmptyMap: an empty set of labels is valid."""
    _accepted(api, {})


def test_validate_chat_labels__valid_labels(api: Contract) -> None:
    """TestValidateChatLabels/ValidLabels: keys of letters, digits, dots, slashes, dashes and
    underscores are valid."""
    _accepted(
        api,
        {
            "env": "production",
            "github.repo": "coder/coder",
            "automation/pr": "12345",
            "team-backend": "core",
            "version_number": "v1.2.3",
            "A1.b2/c3-d4_e5": "mixed",
        },
    )


def test_validate_chat_labels__too_many_labels(api: Contract) -> None:
    """TestValidateChatLabels/TooManyLabels: 51 labels are refused as too many."""
    labels = {"k" * (n + 1): "v" for n in range(51)}
    details = _details(_refused(api, labels))
    assert any("too many labels" in detail for detail in details), details


def test_validate_chat_labels__key_too_long(api: Contract) -> None:
    """TestValidateChatLabels/KeyTooLong: a 65-byte key is refused."""
    details = _details(_refused(api, {"a" * 65: "value"}))
    assert any("exceeds maximum length of 64 bytes" in detail for detail in details), details


def test_validate_chat_labels__value_too_long(api: Contract) -> None:
    """TestValidateChatLabels/ValueTooLong: a 257-byte value is refused."""
    details = _details(_refused(api, {"key": "v" * 257}))
    assert any("exceeds maximum length of 256 bytes" in detail for detail in details), details


def test_validate_chat_labels__invalid_key_with_spaces(api: Contract) -> None:
    """TestValidateChatLabels/InvalidKeyWithSpaces: a space in a key is refused."""
    details = _details(_refused(api, {"invalid key": "value"}))
    assert any("contains invalid characters" in detail for detail in details), details


def test_validate_chat_labels__invalid_key_with_special_chars(api: Contract) -> None:
    """TestValidateChatLabels/InvalidKeyWithSpecialChars: an ``@`` in a key is refused."""
    details = _details(_refused(api, {"key@value": "value"}))
    assert any("contains invalid characters" in detail for detail in details), details


def test_validate_chat_labels__key_starts_with_non_alphanumeric(api: Contract) -> None:
    """TestValidateChatLabels/KeyStartsWithNonAlphanumeric: a key starting with a dot, dash,
    underscore or slash is refused, one error per key."""
    labels = {".dotfirst": "value", "-dashfirst": "value", "_underfirst": "value"}
    labels["/slashfirst"] = "value"
    details = _details(_refused(api, labels))
    assert len(details) == 4, details
    assert all("contains invalid characters" in detail for detail in details), details


def test_validate_chat_labels__empty_key(api: Contract) -> None:
    """TestValidateChatLabels/EmptyKey: an empty key is one error, "must not be empty"."""
    details = _details(_refused(api, {"": "value"}))
    assert len(details) == 1, details
    assert "must not be empty" in details[0]


def test_validate_chat_labels__empty_value(api: Contract) -> None:
    """TestValidateChatLabels/EmptyValue: an empty value is one error, "must not be empty"."""
    details = _details(_refused(api, {"key": ""}))
    assert len(details) == 1, details
    assert "must not be empty" in details[0]


def test_validate_chat_labels__all_fields_are_labels(api: Contract) -> None:
    """TestValidateChatLabels/AllFieldsAreLabels: every error names the field ``labels``."""
    validations = _refused(api, {"bad key": ""})
    assert validations
    assert all(entry["field"] == "labels" for entry in validations), validations


def test_validate_chat_labels__exactly_at_limits(api: Contract) -> None:
    """TestValidateChatLabels/ExactlyAtLimits: a 64-byte key with a 256-byte value is valid."""
    _accepted(api, {"a" * 64: "v" * 256})
