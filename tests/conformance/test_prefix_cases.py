"""Conformance: every ``prefix`` case against the ``PrefixSelector``.

Each call is built by its operation's builder and sent through one selector; the case's
scripted statuses answer the requests in order per route, and ``network_error`` entries are
transport failures. Paths are compared literally: these cases are about the prefix itself.
"""

from __future__ import annotations

import pathlib
from typing import Any

import attrs
import pytest

from coder_proto._errors import CoderAgentError, CoderApiError, CoderNetworkError
from coder_proto._rest.http import HttpRequest, HttpResponse
from coder_proto._rest.prefix import Completed, Failed, PrefixSelector, Retry
from coder_proto._rest.routes import build_get_chat, parse_get_chat

from .corpus import Case, Unreadable, case_of, cases

#: The calls that preflight the prefix when it is not resolved yet.
PREFLIGHT_OPS = frozenset({"stream_events", "watch_chats"})
EXPECT_KEYS = {"requests", "locked_prefix", "locked_prefix_after_call", "results", "stream_url"}


class ScriptedServer:
    """Answers requests from the case's ``responses`` map, in order per route."""

    def __init__(self, responses: dict[str, list[Any]]) -> None:
        self.queues = {key: list(values) for key, values in responses.items()}
        self.requests: list[str] = []

    def answer(self, request: HttpRequest) -> int | str:
        key = f"{request.method} {request.path}"
        self.requests.append(key)
        queue = self.queues.get(key)
        assert queue, f"unscripted request {key}"
        return queue.pop(0)


def run_exchange(
    selector: PrefixSelector, server: ScriptedServer, request: HttpRequest, body: bytes
) -> Completed | Failed:
    exchange = selector.begin(request)
    while True:
        reply = server.answer(exchange.request)
        if reply == "network_error":
            return exchange.on_network_error("fetch failed")
        assert isinstance(reply, int)
        outcome = exchange.on_response(HttpResponse(status=reply, body=body))
        if not isinstance(outcome, Retry):
            return outcome


def run_call(selector: PrefixSelector, server: ScriptedServer, call: dict[str, Any]) -> Any:
    """Run one call; return ``"ok"``, the raised error, or the stream URL dialled."""
    op = call["op"]
    chat_id = call["chat_id"]
    try:
        if op == "get_chat":
            request = build_get_chat(chat_id)
            outcome = run_exchange(selector, server, request, b'{"id": "%s"}' % chat_id.encode())
            if isinstance(outcome, Failed):
                raise outcome.error
            parse_get_chat(outcome.request, outcome.response)
            return "ok"
        if op in PREFLIGHT_OPS:
            prefix = selector.prefix
            if selector.needs_preflight:
                probe = selector.preflight_request(op)
                outcome = run_exchange(selector, server, probe, b"[]")
                if isinstance(outcome, Failed):
                    raise outcome.error
                prefix = selector.preflight_result(outcome)
            return {"stream_url": f"wss://<host>{prefix}/{chat_id}/stream"}
    except CoderAgentError as exc:
        return exc
    raise AssertionError(f"no mapping for op {op!r}")


#: What an expected error may state (a subset of): its class, HTTP status, and the request
#: path it belongs to (the path of the request that failed, under the prefix it used).
ERROR_KEYS = frozenset({"type", "status", "path"})


def matches_error(actual: Any, expected: dict[str, Any]) -> bool:
    unknown = set(expected) - ERROR_KEYS
    assert not unknown, f"error keys {sorted(unknown)} are not part of the prefix vocabulary"
    if not isinstance(actual, CoderAgentError):
        return False
    classes = {"CoderNetworkError": CoderNetworkError, "CoderApiError": CoderApiError}
    if "type" in expected and not isinstance(actual, classes[expected["type"]]):
        return False
    if "status" in expected and getattr(actual, "status", None) != expected["status"]:
        return False
    return not ("path" in expected and getattr(actual, "path", None) != expected["path"])


@pytest.mark.parametrize("case", cases("prefix"))
def test_prefix_case(case: Case | Unreadable) -> None:
    case = case_of(case)
    given, expect = case.given, case.expect
    unknown = set(expect) - EXPECT_KEYS
    assert not unknown, f"expected keys {sorted(unknown)} are not part of the prefix vocabulary"
    selector = PrefixSelector()
    server = ScriptedServer(given["responses"])
    results: list[Any] = []
    locked_after: list[str | None] = []
    for call in given["calls"]:
        results.append(run_call(selector, server, call))
        locked_after.append(selector.prefix)

    assert server.requests == expect["requests"]
    if "locked_prefix" in expect:
        assert selector.prefix == expect["locked_prefix"]
    if "locked_prefix_after_call" in expect:
        assert locked_after == expect["locked_prefix_after_call"]
    if "stream_url" in expect:
        assert results[-1] == {"stream_url": expect["stream_url"]}
    if "results" in expect:
        assert len(results) == len(expect["results"])
        for actual, wanted in zip(results, expect["results"], strict=True):
            if wanted == "ok":
                assert actual == "ok"
            else:
                assert matches_error(actual, wanted["error"]), (actual, wanted)


# -- the error's path ---------------------------------------------------------------------------

#: Two 404s on one call, then a network failure on another: each error belongs to a request.
TWO_ERRORS = Case(
    family="prefix",
    name="error-paths",
    given={
        "calls": [{"op": "get_chat", "chat_id": "c1"}, {"op": "get_chat", "chat_id": "c2"}],
        "responses": {
            "GET /api/v2/chats/c1": [404],
            "GET /api/experimental/chats/c1": [404],
            "GET /api/v2/chats/c2": ["network_error"],
        },
    },
    expect={
        "requests": [
            "GET /api/v2/chats/c1",
            "GET /api/experimental/chats/c1",
            "GET /api/v2/chats/c2",
        ],
        "results": [
            {"error": {"type": "CoderApiError", "status": 404, "path": "/api/v2/chats/c1"}},
            {"error": {"type": "CoderNetworkError", "path": "/api/v2/chats/c2"}},
        ],
        "locked_prefix": None,
    },
    path=pathlib.Path("error-paths.json"),
)


def _with_error(index: int, **error: Any) -> Case:
    results = [dict(r) for r in TWO_ERRORS.expect["results"]]
    results[index] = {"error": {**results[index]["error"], **error}}
    return attrs.evolve(TWO_ERRORS, expect={**TWO_ERRORS.expect, "results": results})


def test_two_404s_report_the_v2_requests_error_and_a_network_error_its_own() -> None:
    test_prefix_case(TWO_ERRORS)


@pytest.mark.parametrize(
    "case",
    [
        _with_error(0, path="/api/experimental/chats/c1"),
        _with_error(1, path="/api/v2/chats/c1"),
        _with_error(0, status=400),
    ],
)
def test_an_error_with_another_path_or_status_fails_the_case(case: Case) -> None:
    with pytest.raises(AssertionError):
        test_prefix_case(case)


def test_an_error_key_outside_the_vocabulary_fails_the_case() -> None:
    with pytest.raises(AssertionError, match="not part of the prefix vocabulary"):
        test_prefix_case(_with_error(0, severity="high"))
