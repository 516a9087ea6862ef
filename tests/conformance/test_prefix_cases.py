"""Conformance: every ``prefix-*.json`` case (FORMAT.md 4.5) against the PrefixSelector.

Each call is built by its operation's builder (TypeScript op names map to ours, D24) and sent
through one selector; the case's scripted statuses answer the requests in order per route, and
``network-error`` entries are transport failures. Paths are compared literally (D25).
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from coder_proto import CoderAgentError, CoderApiError, CoderNetworkError
from coder_proto._rest.http import HttpRequest, HttpResponse
from coder_proto._rest.prefix import Completed, Failed, PrefixSelector, Retry
from coder_proto._rest.routes import build_get_chat, parse_get_chat
from tests.conformance.cases import cases, load

#: TypeScript op names of the calls that preflight -> our op names (D24).
PREFLIGHT_OPS = {"streamEvents": "stream_events", "watchChats": "watch_chats"}


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
        if reply == "network-error":
            return exchange.on_network_error("fetch failed")
        assert isinstance(reply, int)
        outcome = exchange.on_response(HttpResponse(status=reply, body=body))
        if not isinstance(outcome, Retry):
            return outcome


def run_call(selector: PrefixSelector, server: ScriptedServer, call: dict[str, Any]) -> Any:
    """Run one call; return ``"ok"``, the raised error, or the stream URL dialled."""
    op = call["op"]
    chat_id = call["chatId"]
    try:
        if op == "getChat":
            request = build_get_chat(chat_id)
            outcome = run_exchange(selector, server, request, b'{"id": "%s"}' % chat_id.encode())
            if isinstance(outcome, Failed):
                raise outcome.error
            parse_get_chat(outcome.request, outcome.response)
            return "ok"
        if op in PREFLIGHT_OPS:
            prefix = selector.prefix
            if selector.needs_preflight:
                probe = selector.preflight_request(PREFLIGHT_OPS[op])
                outcome = run_exchange(selector, server, probe, b"[]")
                if isinstance(outcome, Failed):
                    raise outcome.error
                prefix = selector.preflight_result(outcome)
            return {"wsUrl": f"wss://<host>{prefix}/{chat_id}/stream"}
    except CoderAgentError as exc:
        return exc
    raise AssertionError(f"no mapping for op {op!r}")


def matches_error(actual: Any, expected: dict[str, Any]) -> bool:
    if not isinstance(actual, CoderAgentError):
        return False
    if expected.get("kind") == "network" and not isinstance(actual, CoderNetworkError):
        return False
    if expected.get("name") == "CoderApiError" and not isinstance(actual, CoderApiError):
        return False
    return not ("status" in expected and getattr(actual, "status", None) != expected["status"])


@pytest.mark.parametrize("path", cases("prefix"))
def test_prefix_case(path: pathlib.Path) -> None:
    case = load(path)
    given = case["input"]
    expected = case["expected"]
    selector = PrefixSelector()
    server = ScriptedServer(given["responses"])
    results: list[Any] = []
    locked_after: list[str | None] = []
    for call in given["calls"]:
        results.append(run_call(selector, server, call))
        locked_after.append(selector.prefix)

    assert server.requests == expected["requests"]
    if "lockedPrefix" in expected:
        assert selector.prefix == expected["lockedPrefix"]
    if "lockedPrefixAfterCall" in expected:
        assert locked_after == expected["lockedPrefixAfterCall"]
    if "wsUrl" in expected:
        assert results[-1] == {"wsUrl": expected["wsUrl"]}
    for actual, wanted in zip(results, expected.get("results", []), strict=False):
        if wanted == "ok":
            assert actual == "ok"
        else:
            assert matches_error(actual, wanted["error"]), (actual, wanted)
    if "results" in expected:
        assert len(results) == len(expected["results"])
