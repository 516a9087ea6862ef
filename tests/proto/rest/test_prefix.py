"""PrefixSelector: v2-first chat prefix negotiation (wire 1.3-1.5)."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import CoderAgentError, CoderApiError, CoderNetworkError
from coder_proto._constants import LEGACY_PREFIX, V2_PREFIX
from coder_proto._rest.http import HttpRequest, HttpResponse
from coder_proto._rest.prefix import (
    PREFLIGHT_OPS,
    Completed,
    Failed,
    PrefixSelector,
    Retry,
    participates,
)
from coder_proto._rest.routes import (
    build_get_chat,
    build_get_messages,
    build_upload_chat_file,
    parse_get_chat,
)

NET = "network-error"


def answer(status: int, body: Any = None) -> HttpResponse:
    import json

    raw = b"" if body is None else json.dumps(body).encode()
    return HttpResponse(status=status, body=raw)


def drive(
    selector: PrefixSelector, request: HttpRequest, answers: list[int | str]
) -> tuple[list[str], Completed | Failed]:
    """Send ``request`` through the selector, answering each attempt with the next entry of
    ``answers``; return the paths requested and the final outcome."""
    exchange = selector.begin(request)
    sent = [exchange.request.path]
    queue = list(answers)
    while True:
        reply = queue.pop(0)
        if reply == NET:
            return sent, exchange.on_network_error("connection refused")
        assert isinstance(reply, int)
        outcome = exchange.on_response(answer(reply, {"id": "c1"}))
        if isinstance(outcome, Retry):
            assert outcome.request == exchange.request
            sent.append(outcome.request.path)
            continue
        assert exchange.done
        return sent, outcome


# -- which requests take part (wire 1.3) -----------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/api/v2/chats",
        "/api/v2/chats?limit=1",
        "/api/v2/chats/c1",
        "/api/v2/chats/c1/messages?after_id=3",
        "/api/v2/chats/files?organization=o",
    ],
)
def test_wire_1_3_chat_routes_participate(path: str) -> None:
    assert participates(path)


@pytest.mark.parametrize(
    "path",
    [
        "/api/v2/chatsx",
        "/api/v2/organizations/o/chats/models",
        "/api/experimental/chats/model-configs",
        "/api/v2/workspaces/w",
        "/api/v2/applications/host",
    ],
)
def test_wire_1_3_other_routes_pass_through_and_never_lock(path: str) -> None:
    selector = PrefixSelector()
    request = HttpRequest.build("list_model_configs", "GET", path)
    sent, outcome = drive(selector, request, [404])
    assert sent == [path]
    assert isinstance(outcome, Completed)
    assert outcome.response.status == 404
    assert selector.prefix is None
    sent, outcome = drive(selector, request, [200])
    assert selector.prefix is None
    assert isinstance(drive(selector, request, [NET])[1], Failed)


def test_wire_1_3_other_routes_are_not_rewritten_when_locked() -> None:
    selector = PrefixSelector(LEGACY_PREFIX)
    request = HttpRequest.build("list_model_configs", "GET", "/api/v2/organizations/o/chats/models")
    assert selector.begin(request).request.path == "/api/v2/organizations/o/chats/models"


# -- unset prefix (wire 1.4 rule 2) ----------------------------------------------------------


def test_wire_1_4_v2_success_locks_v2() -> None:
    selector = PrefixSelector()
    sent, outcome = drive(selector, build_get_chat("c1"), [200])
    assert sent == ["/api/v2/chats/c1"]
    assert isinstance(outcome, Completed)
    assert outcome.ok
    assert outcome.request.path == "/api/v2/chats/c1"
    assert selector.prefix == V2_PREFIX
    assert not selector.needs_preflight


@pytest.mark.parametrize("status", [400, 401, 403, 409, 429, 500, 503])
def test_wire_1_4_v2_http_error_other_than_404_locks_v2_and_raises_it(status: int) -> None:
    selector = PrefixSelector()
    request = build_get_chat("c1")
    sent, outcome = drive(selector, request, [status])
    assert sent == ["/api/v2/chats/c1"]
    assert selector.prefix == V2_PREFIX
    assert isinstance(outcome, Completed)
    with pytest.raises(CoderApiError) as info:
        parse_get_chat(outcome.request, outcome.response)
    assert info.value.status == status
    assert info.value.path == "/api/v2/chats/c1"


def test_wire_1_4_network_error_raises_and_does_not_lock() -> None:
    selector = PrefixSelector()
    sent, outcome = drive(selector, build_get_chat("c1"), [NET])
    assert sent == ["/api/v2/chats/c1"]
    assert isinstance(outcome, Failed)
    error = outcome.error
    assert isinstance(error, CoderNetworkError)
    assert error.retryable
    assert error.method == "GET"
    assert error.path == "/api/v2/chats/c1"
    assert "connection refused" in str(error)
    assert selector.prefix is None
    assert selector.needs_preflight


def test_wire_1_4_v2_404_retries_the_same_request_on_legacy_and_locks_legacy() -> None:
    selector = PrefixSelector()
    request = build_get_messages("c1", after_id=7, limit=3)
    exchange = selector.begin(request)
    outcome = exchange.on_response(answer(404))
    assert isinstance(outcome, Retry)
    retry = outcome.request
    assert retry.path == "/api/experimental/chats/c1/messages?after_id=7&limit=3"
    assert (retry.op, retry.method, retry.headers, retry.body, retry.json) == (
        request.op,
        request.method,
        request.headers,
        request.body,
        request.json,
    )
    assert selector.prefix is None  # a 404 alone is not conclusive
    final = exchange.on_response(answer(200, {"messages": []}))
    assert isinstance(final, Completed)
    assert final.request == retry
    assert final.response.status == 200
    assert selector.prefix == LEGACY_PREFIX


def test_wire_1_4_fallback_keeps_an_upload_body_and_headers() -> None:
    selector = PrefixSelector()
    request = build_upload_chat_file("org", b"hello", media_type="text/plain")
    exchange = selector.begin(request)
    retry = exchange.on_response(answer(404))
    assert isinstance(retry, Retry)
    assert retry.request.path == "/api/experimental/chats/files?organization=org"
    assert retry.request.body == b"hello"
    assert retry.request.headers == request.headers


def test_wire_1_4_two_404s_raise_the_original_v2_404_and_leave_it_unset() -> None:
    selector = PrefixSelector()
    sent, outcome = drive(selector, build_get_chat("c1"), [404, 404])
    assert sent == ["/api/v2/chats/c1", "/api/experimental/chats/c1"]
    assert isinstance(outcome, Completed)
    assert outcome.request.path == "/api/v2/chats/c1"
    with pytest.raises(CoderApiError) as info:
        parse_get_chat(outcome.request, outcome.response)
    assert info.value.status == 404
    assert info.value.path == "/api/v2/chats/c1"
    assert selector.prefix is None
    # Negotiation stays open: the next call probes v2 again.
    sent, _ = drive(selector, build_get_chat("c2"), [200])
    assert sent == ["/api/v2/chats/c2"]
    assert selector.prefix == V2_PREFIX


def test_wire_1_4_legacy_http_error_locks_legacy_and_raises_the_legacy_error() -> None:
    selector = PrefixSelector()
    sent, outcome = drive(selector, build_get_chat("c1"), [404, 500])
    assert sent == ["/api/v2/chats/c1", "/api/experimental/chats/c1"]
    assert isinstance(outcome, Completed)
    assert outcome.request.path == "/api/experimental/chats/c1"
    assert outcome.response.status == 500
    assert selector.prefix == LEGACY_PREFIX


def test_wire_1_4_legacy_network_error_raises_it_without_locking() -> None:
    selector = PrefixSelector()
    sent, outcome = drive(selector, build_get_chat("c1"), [404, NET])
    assert sent == ["/api/v2/chats/c1", "/api/experimental/chats/c1"]
    assert isinstance(outcome, Failed)
    assert isinstance(outcome.error, CoderNetworkError)
    assert outcome.error.path == "/api/experimental/chats/c1"
    assert selector.prefix is None


# -- locked prefix (wire 1.4 rule 1) ---------------------------------------------------------


def test_wire_1_4_locked_v2_sends_once_and_never_falls_back() -> None:
    selector = PrefixSelector()
    drive(selector, build_get_chat("c1"), [200])
    sent, outcome = drive(selector, build_get_chat("c2"), [404])
    assert sent == ["/api/v2/chats/c2"]
    assert isinstance(outcome, Completed)
    assert outcome.response.status == 404
    assert selector.prefix == V2_PREFIX


def test_wire_1_4_locked_legacy_rewrites_and_never_renegotiates() -> None:
    selector = PrefixSelector()
    drive(selector, build_get_chat("c1"), [404, 200])
    sent, outcome = drive(selector, build_get_messages("c2", limit=1), [404])
    assert sent == ["/api/experimental/chats/c2/messages?limit=1"]
    assert isinstance(outcome, Completed)
    assert outcome.response.status == 404
    sent, outcome = drive(selector, build_get_chat("c3"), [NET])
    assert sent == ["/api/experimental/chats/c3"]
    assert selector.prefix == LEGACY_PREFIX


def test_wire_1_4_locked_prefix_rewrites_the_bare_listing_path() -> None:
    selector = PrefixSelector(LEGACY_PREFIX)
    request = HttpRequest.build("list_chats", "GET", "/api/v2/chats?limit=1")
    assert selector.begin(request).request.path == "/api/experimental/chats?limit=1"


# -- concurrency (wire 1.4 rule 3) -----------------------------------------------------------


def test_wire_1_4_a_404_after_a_concurrent_v2_lock_is_raised_without_fallback() -> None:
    selector = PrefixSelector()
    first = selector.begin(build_get_chat("c1"))
    second = selector.begin(build_get_chat("c2"))
    assert first.negotiating
    assert second.negotiating
    assert isinstance(second.on_response(answer(200, {"id": "c2"})), Completed)
    outcome = first.on_response(answer(404))
    assert isinstance(outcome, Completed)
    assert outcome.request.path == "/api/v2/chats/c1"
    assert outcome.response.status == 404
    assert selector.prefix == V2_PREFIX


def test_wire_1_4_a_404_after_a_concurrent_legacy_lock_still_falls_back() -> None:
    selector = PrefixSelector()
    first = selector.begin(build_get_chat("c1"))
    drive(selector, build_get_chat("c2"), [404, 200])
    assert selector.prefix == LEGACY_PREFIX
    retry = first.on_response(answer(404))
    assert isinstance(retry, Retry)
    assert retry.request.path == "/api/experimental/chats/c1"


def test_wire_1_4_a_late_response_never_overwrites_the_first_lock() -> None:
    selector = PrefixSelector()
    slow = selector.begin(build_get_chat("c1"))
    assert isinstance(slow.on_response(answer(404)), Retry)
    drive(selector, build_get_chat("c2"), [200])
    assert selector.prefix == V2_PREFIX
    late = slow.on_response(answer(200, {"id": "c1"}))
    assert isinstance(late, Completed)
    assert late.request.path == "/api/experimental/chats/c1"
    assert selector.prefix == V2_PREFIX


def test_wire_1_4_a_late_v2_answer_does_not_overwrite_a_legacy_lock() -> None:
    selector = PrefixSelector()
    slow = selector.begin(build_get_chat("c1"))
    drive(selector, build_get_chat("c2"), [404, 500])
    assert selector.prefix == LEGACY_PREFIX
    assert isinstance(slow.on_response(answer(200, {"id": "c1"})), Completed)
    assert selector.prefix == LEGACY_PREFIX


Script = list[int | str]


def _conclusive(status: int | str) -> bool:
    return isinstance(status, int) and status != 404


answers_st = st.lists(st.sampled_from([200, 204, 400, 404, 404, 500, NET]), min_size=2, max_size=2)


@settings(max_examples=300, deadline=None)
@given(
    scripts=st.lists(answers_st, min_size=2, max_size=3),
    order=st.lists(st.integers(min_value=0, max_value=2), max_size=12),
)
def test_wire_1_4_interleaved_exchanges_first_conclusive_answer_wins(
    scripts: list[Script], order: list[int]
) -> None:
    """Concurrent exchanges probe independently; whatever the interleaving, the lock is set by
    the first conclusive answer delivered (2xx or a non-404 error, on whichever prefix it was
    sent) and never changes afterwards; a v2 404 arriving after a v2 lock is final."""
    selector = PrefixSelector()
    exchanges = [selector.begin(build_get_chat(f"c{i}")) for i in range(len(scripts))]
    cursors = [0] * len(scripts)
    expected: str | None = None
    for pick in order + list(range(len(scripts))) * 2:
        i = pick % len(scripts)
        exchange = exchanges[i]
        if exchange.done:
            continue
        reply = scripts[i][cursors[i]]
        cursors[i] += 1
        on_legacy = exchange.request.path.startswith(LEGACY_PREFIX)
        prefix_before = selector.prefix
        if reply == NET:
            outcome: Any = exchange.on_network_error("reset")
            assert isinstance(outcome, Failed)
        else:
            assert isinstance(reply, int)
            outcome = exchange.on_response(answer(reply, {"id": "x"}))
            if expected is None and _conclusive(reply):
                expected = LEGACY_PREFIX if on_legacy else V2_PREFIX
            if reply == 404 and not on_legacy:
                if prefix_before == V2_PREFIX:
                    assert isinstance(outcome, Completed)
                else:
                    assert isinstance(outcome, Retry)
            if reply == 404 and on_legacy:
                assert isinstance(outcome, Completed)
                assert outcome.request.path.startswith(V2_PREFIX)
        assert selector.prefix == expected
    assert all(e.done for e in exchanges)


# -- preflight (wire 1.5) --------------------------------------------------------------------


@pytest.mark.parametrize("op", sorted(PREFLIGHT_OPS))
def test_wire_1_5_preflight_probes_the_chat_listing(op: str) -> None:
    selector = PrefixSelector()
    assert selector.needs_preflight
    probe = selector.preflight_request(op)
    assert (probe.op, probe.method, probe.path, probe.body, probe.headers) == (
        op,
        "GET",
        "/api/v2/chats",
        None,
        (),
    )


def test_wire_1_5_preflight_rejects_other_ops() -> None:
    with pytest.raises(CoderAgentError, match="get_chat"):
        PrefixSelector().preflight_request("get_chat")


def test_wire_1_5_preflight_success_returns_the_locked_prefix() -> None:
    selector = PrefixSelector()
    _, outcome = drive(selector, selector.preflight_request("stream_events"), [404, 200])
    assert isinstance(outcome, Completed)
    assert selector.preflight_result(outcome) == LEGACY_PREFIX
    assert not selector.needs_preflight


def test_wire_1_5_preflight_two_404s_raise_the_v2_404() -> None:
    selector = PrefixSelector()
    _, outcome = drive(selector, selector.preflight_request("watch_chats"), [404, 404])
    assert isinstance(outcome, Completed)
    with pytest.raises(CoderApiError) as info:
        selector.preflight_result(outcome)
    assert (info.value.status, info.value.method, info.value.path) == (404, "GET", V2_PREFIX)
    assert selector.needs_preflight


def test_wire_1_5_guard_probe_succeeded_without_a_prefix() -> None:
    selector = PrefixSelector()
    with pytest.raises(CoderAgentError, match=r"^Chat route probe succeeded without a prefix$"):
        selector.require_prefix()
    fake = Completed(selector.preflight_request("upload_chat_file"), answer(200, []))
    with pytest.raises(CoderAgentError, match="without a prefix"):
        selector.preflight_result(fake)


# -- misuse ----------------------------------------------------------------------------------


def test_feeding_a_finished_exchange_raises_a_library_error() -> None:
    selector = PrefixSelector()
    exchange = selector.begin(build_get_chat("c1"))
    exchange.on_response(answer(200, {"id": "c1"}))
    with pytest.raises(CoderAgentError):
        exchange.on_response(answer(200))
    with pytest.raises(CoderAgentError):
        exchange.on_network_error("late")


def test_initial_prefix_must_be_known() -> None:
    assert PrefixSelector(V2_PREFIX).prefix == V2_PREFIX
    assert "experimental" in repr(PrefixSelector(LEGACY_PREFIX))
    with pytest.raises(CoderAgentError, match="unknown chat prefix"):
        PrefixSelector("/api/v3/chats")


def test_network_error_message_without_text_is_still_clear() -> None:
    exchange = PrefixSelector().begin(build_get_chat("c1"))
    failed = exchange.on_network_error("")
    assert "network error" in str(failed.error)
