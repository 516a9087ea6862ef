"""The error hierarchy (wire 10; D21)."""

from __future__ import annotations

import pickle

import pytest

from coder_proto import (
    CoderAgentError,
    CoderApiError,
    CoderChatError,
    CoderNetworkError,
    CoderProtocolError,
    CoderStreamError,
)
from coder_proto._errors import MAX_DETAIL, api_error_message, is_retryable_status


def test_every_error_is_a_coder_agent_error_d21() -> None:
    for cls in (
        CoderApiError,
        CoderChatError,
        CoderNetworkError,
        CoderProtocolError,
        CoderStreamError,
    ):
        assert issubclass(cls, CoderAgentError)


def test_api_error_message_format_wire_10() -> None:
    err = CoderApiError(
        status=409, method="patch", path="/api/v2/chats/c1", server_message="Busy", detail="wait"
    )
    assert str(err) == "Coder API PATCH /api/v2/chats/c1 failed (409): Busy — wait"
    assert err.method == "PATCH"
    assert (
        api_error_message("get", "/x", 404, "nope", None) == "Coder API GET /x failed (404): nope"
    )


def test_api_error_falls_back_to_status_text_then_request_failed() -> None:
    assert CoderApiError(status=404, method="GET", path="/p").server_message == "Not Found"
    assert CoderApiError(status=599, method="GET", path="/p").server_message == "request failed"


@pytest.mark.parametrize(
    ("status", "retryable"),
    [
        (408, True),
        (425, True),
        (429, True),
        (500, True),
        (503, True),
        (599, True),
        (400, False),
        (401, False),
        (403, False),
        (404, False),
        (409, False),
        (200, False),
    ],
)
def test_api_error_retryable_statuses_d21(status: int, retryable: bool) -> None:
    assert is_retryable_status(status) is retryable
    assert CoderApiError(status=status, method="GET", path="/p").retryable is retryable


def test_chat_error_message_joins_detail_wire_10() -> None:
    err = CoderChatError(
        "Rate limited", detail="try later", kind="rate_limit", retryable=True, status_code=429
    )
    assert str(err) == "Rate limited: try later"
    assert (err.kind, err.retryable, err.status_code) == ("rate_limit", True, 429)
    assert str(CoderChatError("boom")) == "boom"
    assert CoderChatError("boom").retryable is False


def test_network_error_is_retryable_d21() -> None:
    err = CoderNetworkError("connection refused", method="post", path="/api/v2/chats")
    assert err.retryable is True and err.method == "POST"


def test_stream_error_defaults_retryable() -> None:
    err = CoderStreamError("gone", url="wss://x/api/v2/chats/c/stream", chat_id="c")
    assert err.retryable is True and err.chat_id == "c"


@pytest.mark.parametrize(
    "err",
    [
        CoderAgentError("plain", chat_id="c"),
        CoderProtocolError("bad frame"),
        CoderApiError(
            status=400,
            method="POST",
            path="/p",
            server_message="m",
            detail="d",
            validations=({"field": "x", "detail": "y"},),
            kind="hook_denied",
            chat_id="c",
        ),
        CoderChatError(
            "m",
            detail="d",
            kind="timeout",
            provider="p",
            retryable=True,
            status_code=504,
            chat_id="c",
            withdrawn=False,
        ),
        CoderNetworkError("refused", method="GET", path="/p", chat_id="c"),
        CoderStreamError(
            "gone", url="wss://h/s", chat_id="c", retryable=False, reason="untrackable-deltas"
        ),
    ],
)
def test_errors_are_picklable_with_all_fields(err: CoderAgentError) -> None:
    err.__cause__ = ValueError("cause")
    err.add_note("a note")
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is type(err)
    assert str(copy) == str(err)
    assert copy._state() == err._state()
    assert copy.retryable == err.retryable
    assert isinstance(copy.__cause__, ValueError)
    assert copy.__notes__ == ["a note"]
    assert repr(copy) == repr(err)


def test_repr_lists_set_fields_only() -> None:
    assert repr(CoderAgentError("x")) == "CoderAgentError('x')"
    assert "chat_id='c'" in repr(CoderAgentError("x", chat_id="c"))


def test_an_api_error_keeps_at_most_8_kib_of_what_the_server_sent_d30() -> None:
    huge = "x" * 50_000_000
    error = CoderApiError(
        status=500,
        method="POST",
        path="/api/v2/chats",
        server_message=huge,
        detail=huge,
        validations=tuple({"field": f"f{i}", "detail": "bad"} for i in range(100_000)),
    )
    assert len(error.server_message) <= MAX_DETAIL
    assert error.server_message.endswith("[... cut: 50000000 characters in full]")
    assert error.detail is not None and len(error.detail) <= MAX_DETAIL
    assert len(str(error)) <= MAX_DETAIL
    assert error.validations is not None and 0 < len(repr(error.validations)) <= MAX_DETAIL + 2
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error) and again.server_message == error.server_message


def test_a_chat_error_and_any_library_error_keep_at_most_8_kib_d30() -> None:
    error = CoderChatError("m" * 100_000, detail="d" * 100_000)
    assert len(str(error)) <= MAX_DETAIL and "cut: 100000 characters" in error.server_message
    assert len(str(CoderProtocolError("p" * 20_000))) <= MAX_DETAIL
    assert str(CoderProtocolError("short")) == "short"
