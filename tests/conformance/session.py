"""Running a session-level case (``turn`` cases and session-level ``promotion`` cases) and
checking every expectation it states.

A case runs the real session, turn and segment machines through ``tests/core_driver.py``: no
sockets, a fake clock, the case's scripted REST answers (every other request gets the
driver's default answer), and either real ``StreamReader`` connections driven by the case's
``timeline`` (``transport: websocket``) or the stand-in stream of ``transport: scripted``.

The expectation vocabulary is closed (``OUTCOME_CHECKS`` for how a call ended, evaluated for
the last call at the top level and for any call under ``calls``; ``TRAFFIC_CHECKS`` for what
the whole run sent and dialled): a key outside it fails the case.
"""

from __future__ import annotations

import base64
import json
import re
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import coder_proto
from coder_proto._actions import ToolOutcome
from coder_proto._agent.prompt import (
    AssistantMessage,
    FileContent,
    SystemMessage,
    TextContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from coder_proto._agent.session import Session
from coder_proto._agent.session_state import SessionConfig
from coder_proto._agent.turn import Turn
from coder_proto._errors import CoderAgentError
from coder_proto._outputs import ErrorPart, Finish, Source, StreamStart, ToolCall
from coder_proto._rest.http import HttpRequest
from coder_proto._transport_events import TransportEventSink
from coder_proto._wire.chats import DynamicTool
from tests.core_driver import CaseEnv, Driver, Hang, NetworkError, Reply, Respond, empty_page

from .mapping import BlockIds, assert_parts_match, matches, part_view, strip_nulls, usage_view

__all__ = [
    "OUTCOME_CHECKS",
    "TRAFFIC_CHECKS",
    "CallerCancelled",
    "CaseRun",
    "check_error",
    "check_expectations",
    "run_case",
]

BASE_URL = "https://coder.test"
PREFIX = "/api/v2/chats"
#: How long ``until_done`` waits for the call at most (fake seconds).
UNTIL_DONE_LIMIT = 600.0


class CallerCancelled(Exception):
    """The reason a case's ``cancel`` entry cancels the running call with: what a runtime's
    own cancellation raises out of the call (the core never wraps it)."""


# -- inputs -------------------------------------------------------------------------------------


def prompt_from_json(prompt: Any) -> Any:
    """A case's prompt: a string, or messages of our prompt types."""
    if isinstance(prompt, str):
        return prompt
    messages: list[Any] = []
    for message in prompt:
        role, content = message["role"], message["content"]
        if role == "system":
            messages.append(SystemMessage(content))
        elif role == "user":
            parts: list[Any] = []
            for part in content:
                if part["type"] == "text":
                    parts.append(TextContent(part["text"]))
                else:
                    assert part["type"] == "file", part
                    data = part.get("data_base64")
                    parts.append(
                        FileContent(
                            data=base64.b64decode(data) if data is not None else None,
                            media_type=part.get("media_type"),
                            filename=part.get("filename"),
                            file_id=part.get("file_id"),
                        )
                    )
            messages.append(UserMessage(tuple(parts)))
        elif role == "assistant":
            messages.append(AssistantMessage(tuple(content)))
        else:
            assert role == "tool", role
            messages.append(ToolMessage(tuple(ToolResultContent(**part) for part in content)))
    return messages


def tools_from_json(tools: list[dict[str, Any]]) -> tuple[DynamicTool, ...]:
    return tuple(
        DynamicTool(
            name=tool["name"],
            input_schema=tool.get("input_schema") or {},
            description=tool.get("description"),
        )
        for tool in tools
    )


def _reply(value: dict[str, Any]) -> Reply:
    if value.get("hang"):
        return Hang()
    if "network_error" in value:
        return NetworkError(value["network_error"])
    return Respond(value.get("status", 200), value.get("body"), delay=value.get("delay", 0.0))


class ScriptedRest:
    """The case's REST answers, keyed ``METHOD path`` or ``METHOD path?query`` (the query
    form wins); a list answers successive requests and its last answer repeats."""

    def __init__(self, rest: dict[str, Any]) -> None:
        self.rest = rest
        self.served: dict[str, int] = {}

    def routes(self) -> dict[str, Callable[[HttpRequest], Reply]]:
        """Handlers per ``METHOD route`` for ``CaseEnv``."""
        out: dict[str, Callable[[HttpRequest], Reply]] = {}
        for key in self.rest:
            route = key.partition("?")[0]
            out[route] = self.answer
        return out

    def answer(self, request: HttpRequest) -> Reply:
        route = request.path.partition("?")[0]
        key = f"{request.method} {request.path}"
        if key not in self.rest:
            key = f"{request.method} {route}"
        if key not in self.rest:
            # Only a query form of this route is scripted (the cursor probe): the rest of the
            # route's requests read an empty page.
            assert request.method == "GET" and route.endswith("/messages"), key
            return Respond(200, empty_page())
        value = self.rest[key]
        if isinstance(value, list):
            index = self.served.get(key, 0)
            self.served[key] = index + 1
            value = value[min(index, len(value) - 1)]
        return _reply(value)


def _tool_behaviour(spec: dict[str, Any]) -> Callable[[Any], Any]:
    """A client tool that accepts any input and returns an object of exactly the keys
    ``from_input`` (each taken from the input; absent when the input lacks it) and
    ``literal`` (fixed values)."""
    assert set(spec) <= {"from_input", "literal"}, spec
    keys = list(spec.get("from_input") or [])
    literal = dict(spec.get("literal") or {})

    def behaviour(args: Any) -> Any:
        given = args if isinstance(args, dict) else {}
        return {**{k: given[k] for k in keys if k in given}, **literal}

    return behaviour


# -- running ------------------------------------------------------------------------------------


class Outcome:
    """How one call ended (or that it is still pending), measured when it ended."""

    def __init__(self, call: dict[str, Any], machine: Turn, first_event: int) -> None:
        self.call = call
        self.machine = machine
        self.first_event = first_event
        self.last_event = first_event
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.state: dict[str, Any] = {}

    def finish(self, run: CaseRun) -> None:
        self.done = True
        machine = self.machine
        if machine.cancelled:
            self.error = run.cancel_reason
        elif machine.error is not None:
            self.error = machine.error
        else:
            self.result = machine.result()
        self.last_event = len(run.env.events)
        session = run.session
        translator = machine.segment.translator if machine.segment is not None else None
        self.state = {
            "first_socket_closed": run.socket0_closed(),
            "last_known_chat_id": session.last_known_chat_id,
            "chat_id_after": session.chat_id,
            "last_seen_message_id_after": session.last_seen_message_id,
            "anchored_turn_cursor": translator.turn_cursor if translator is not None else None,
        }

    @property
    def parts(self) -> list[Any]:
        return list(self.machine.parts)

    def events(self, run: CaseRun) -> list[Any]:
        end = self.last_event if self.done else len(run.env.events)
        return run.env.events[self.first_event : end]


class CaseRun:
    """One session-level case, run."""

    def __init__(self, given: dict[str, Any], expect: dict[str, Any] | None = None) -> None:
        config = dict(given.get("config") or {})
        self.given = given
        self.expect = expect or {}
        self.transport = given.get("transport", "websocket")
        assert self.transport in ("websocket", "scripted"), self.transport
        stream_then = given.get("stream_then", "stay_open")
        self.rest = ScriptedRest(given.get("rest") or {})
        self.env = CaseEnv(
            rest=self.rest.routes(),
            transport="real-reader" if self.transport == "websocket" else "scripted-client",
            stream_batches=given.get("stream_batches"),
            stream_then=(
                CoderAgentError(stream_then["fail"])
                if isinstance(stream_then, dict)
                else ("end" if stream_then == "end" else None)
            ),
            organization_id=config.get("organization_id") or "org-1",
        )
        self.tool_outputs = {
            name: _tool_behaviour(spec) for name, spec in (given.get("tool_outputs") or {}).items()
        }
        self.tool_inputs: list[Any] = []
        self.ops: list[str] = []
        self.stream_after_ids: list[int | None] = []
        timeout = config.get("request_timeout")
        self.session = Session(
            SessionConfig(
                base_url=BASE_URL,
                token="tok-secret",
                organization_id=config.get("organization_id"),
                instructions=config.get("instructions"),
                workspace_id=config.get("workspace_id"),
                mcp_server_ids=tuple(config.get("mcp_server_ids") or ()),
                chat_id=config.get("chat_id"),
                last_seen_message_id=config.get("last_seen_message_id"),
                request_timeout=timeout,
                tools=tools_from_json(config.get("tools") or []),
            ),
            sink=TransportEventSink(self.env.sink, wall_clock=lambda: 0.0),
            reader_factory=self._reader,
        )
        self.driver = Driver(
            self.session,
            http=self._http,
            tools=self._run_tool,
            auto_accept=self.transport == "scripted",
        )
        self.queue = list(given["calls"])
        self.outcomes: dict[str, Outcome] = {}
        self.order: list[Outcome] = []
        self.current: Outcome | None = None
        self.reached: list[str] = []
        self.cancel_reason: BaseException | None = None

    # -- the world's side -----------------------------------------------------------------

    def _http(self, request: HttpRequest) -> Reply:
        route, _, query = request.path.partition("?")
        rest = route[len(PREFIX) + 1 :] if route.startswith(PREFIX + "/") else ""
        args = [a for a in (rest.partition("/")[0], query.replace("&", ", ")) if a]
        self.ops.append(f"{request.op}({', '.join(args)})")
        return self.env.http(request)

    def _reader(self, **kwargs: Any) -> Any:
        after_id = kwargs["after_id"]
        self.stream_after_ids.append(after_id)
        suffix = f", after_id={after_id}" if after_id is not None else ""
        self.ops.append(f"stream_events({kwargs['chat_id']}{suffix})")
        return self.env.reader_factory(**kwargs)

    def _run_tool(self, call: ToolCall) -> ToolOutcome:
        args = json.loads(call.input)
        self.tool_inputs.append(args)
        behaviour = self.tool_outputs.get(call.tool_name)
        assert behaviour is not None, f"the case gives no behaviour for tool {call.tool_name!r}"
        return ToolOutcome(tool_call_id=call.tool_call_id, output=behaviour(args))

    # -- measures ---------------------------------------------------------------------------

    def dial_count(self) -> int:
        """Stream dials: WebSocket connections, or stand-in streams for ``scripted``."""
        if self.transport == "scripted":
            return len(self.env.readers)
        return len(self.driver.sockets)

    def socket0_closed(self) -> bool | None:
        if self.transport == "scripted":
            return self.env.readers[0].done if self.env.readers else None
        if not self.driver.sockets:
            return None
        sock = self.driver.sockets[0]
        return sock.closed_by_client or sock.ended

    def requests(self) -> list[HttpRequest]:
        return self.driver.requests()

    # -- running ----------------------------------------------------------------------------

    def _start(self, call: dict[str, Any]) -> None:
        prompt = prompt_from_json(call["prompt"])
        now = self.driver.now
        first_event = len(self.env.events)  # the machine reports from its construction on
        if call["call"] == "generate":
            machine = self.session.generate(prompt, now=now)
        else:
            assert call["call"] == "segment", call["call"]
            tools = tools_from_json(call["tools"]) if "tools" in call else None
            machine = self.session.segment(prompt, now=now, mode=call["mode"], tools=tools)
        outcome = Outcome(call, machine, first_event)
        self.outcomes[call.get("id", f"call-{len(self.order)}")] = outcome
        self.order.append(outcome)
        self.current = outcome
        self.driver.start(machine)

    def progress(self) -> None:
        """Record finished calls and start the next eligible one."""
        while True:
            current = self.current
            if current is not None and not current.done:
                if not current.machine.done:
                    return
                current.finish(self)
            if not self.queue:
                return
            after = self.queue[0].get("starts_after")
            if after is not None and after not in self.reached:
                return
            self._start(self.queue.pop(0))

    def execute(self) -> None:
        if self.transport == "scripted":
            self._execute_scripted()
        else:
            self._execute_timeline()
        if "at_checkpoint" in self.expect:
            assert self.reached, "at_checkpoint is expected but the timeline has no checkpoint"

    def _execute_scripted(self) -> None:
        """The stand-in stream serves its batches by itself; a ``timeline`` (no socket
        entries) acts on the call in flight first. Then each call runs until it ends (or,
        with ``cancel_after``, until its caller's deadline), the next one starting after it;
        a call left idle on an open stream ends the run."""
        self.progress()
        for item in self.given.get("timeline") or []:
            assert "socket" not in item, f"a scripted stream has no socket to drive: {item!r}"
            self._apply(item)
            self.progress()
        while self.current is not None and not self.current.done:
            outcome = self.current
            if "cancel_after" in outcome.call:
                self.driver.advance(outcome.call["cancel_after"])
                if not outcome.machine.done:
                    self.cancel_reason = TimeoutError("the caller's deadline passed")
                    self.driver.cancel(self.cancel_reason)
            else:
                self._run_until_done(outcome.machine, UNTIL_DONE_LIMIT)
            if not outcome.machine.done:
                break  # idle: the stream stays open
            self.progress()
        self.driver.drain_background()

    def _run_until_done(self, machine: Turn, limit: float) -> None:
        end = self.driver.now + limit
        while not machine.done:
            due = self.driver.next_due()
            if due is None or due > end:
                return  # idle: the stream stays open
            self.driver.now = max(self.driver.now, due)
            self.driver.settle()

    def _execute_timeline(self) -> None:
        self.progress()
        for item in self.given.get("timeline") or []:
            if "socket" in item:
                sock = self.driver.sockets[item["socket"]]
                if "frame" in item:
                    sock.send_events(item["frame"])
                elif "drop" in item:
                    sock.drop()
                elif "close" in item:
                    sock.close(item["close"])
                elif "reject" in item:
                    sock.reject(item["reject"])
                elif "fail" in item:
                    sock.fail(item["fail"])
                else:
                    raise AssertionError(f"unknown socket entry {item!r}")
                self.driver.settle()
            else:
                self._apply(item)
            self.progress()
        self.driver.drain_background()
        self.progress()

    def _apply(self, item: dict[str, Any]) -> None:
        """A timeline entry of either transport: the clock, a checkpoint, the caller's
        cancellation of the call in flight, or running the clock until that call ends."""
        if "advance" in item:
            self.driver.advance(item["advance"])
        elif "checkpoint" in item:
            self.reached.append(item["checkpoint"])
            if "at_checkpoint" in self.expect:
                check_traffic(self.expect["at_checkpoint"], self)
        elif "cancel" in item:
            self.cancel_reason = CallerCancelled("the caller cancelled the call")
            self.driver.cancel(self.cancel_reason)
        elif "until_done" in item:
            assert self.current is not None
            self._run_until_done(self.current.machine, item["until_done"])
        else:
            raise AssertionError(f"unknown timeline entry {item!r}")


def run_case(given: dict[str, Any], expect: dict[str, Any]) -> CaseRun:
    """Run a session-level case and check every expectation (``AssertionError`` names the
    first one that does not hold)."""
    run = CaseRun(given, expect)
    run.execute()
    check_expectations(expect, run)
    return run


# -- checking -----------------------------------------------------------------------------------


def check_error(want: dict[str, Any], error: BaseException | None) -> None:
    """An error expectation: class name, attributes, ``message_matches`` (a regular
    expression searched in the message), ``message_prefix`` and ``isinstance``."""
    assert error is not None, "the call was expected to fail"
    for key, value in want.items():
        if key == "type":
            assert type(error).__name__ == value, (type(error).__name__, error)
        elif key in ("kind", "retryable", "chat_id", "status", "reason"):
            assert getattr(error, key, None) == value, (key, getattr(error, key, None), error)
        elif key == "message_matches":
            assert re.search(value, str(error)), str(error)
        elif key == "message_prefix":
            assert str(error).startswith(value), str(error)
        elif key == "isinstance":
            for name, expected in value.items():
                cls = getattr(coder_proto, name)  # the library's public error classes
                assert isinstance(error, cls) is expected, (name, error)
        else:
            raise AssertionError(f"error key {key!r} is not part of the vocabulary")


def _result(outcome: Outcome) -> Any:
    assert outcome.result is not None, f"the call failed with {outcome.error!r}"
    return outcome.result


def _tool_calls(outcome: Outcome) -> list[dict[str, Any]]:
    calls = [c for step in _result(outcome).steps for c in step.tool_calls]
    return [part_view(c) for c in calls]


def _own_parts(outcome: Outcome, want: list[Any]) -> list[Any]:
    """The call's parts; a leading ``stream-start`` is compared only when the case states it."""
    parts = outcome.parts
    if want and want[0].get("type") == "stream-start":
        return parts
    return [p for p in parts if not isinstance(p, StreamStart)]


def _source_view(source: Source) -> dict[str, Any]:
    view = part_view(source)
    view.pop("type")
    return view


def _settle_matches(want: dict[str, Any], event: Any) -> bool:
    for key, value in want.items():
        if key == "error":
            got = event.error
            if value is None:
                if got is not None:
                    return False
                continue
            if got is None:
                return False
            if "name" in value and got.get("name") != value["name"]:
                return False
            if "message_matches" in value and not re.search(
                value["message_matches"], got.get("message", "")
            ):
                return False
        elif key in ("type", "segment", "status", "finish_reason"):
            if not matches(value, getattr(event, key)):
                return False
        else:
            raise AssertionError(f"segment event key {key!r} is not part of the vocabulary")
    return True


def _segment_settle(want: Any, outcome: Outcome, run: CaseRun) -> None:
    settles = [e for e in outcome.events(run) if e.type == "segment:settle"]
    assert settles, "the call reported no segment:settle event"
    assert _settle_matches(want, settles[-1]), settles[-1]


def _last_part(want: Any, outcome: Outcome, run: CaseRun) -> None:
    parts = outcome.parts
    assert parts, "the call emitted no part"
    assert_parts_match([want], parts[-1:], BlockIds())


def _usage(want: Any, outcome: Outcome, run: CaseRun) -> None:
    got = usage_view(_result(outcome).steps[-1].usage)
    assert matches(want, got), got


def _state(key: str) -> Callable[[Any, Outcome, CaseRun], None]:
    def check(want: Any, outcome: Outcome, run: CaseRun) -> None:
        assert outcome.done, "the call never ended"
        assert outcome.state[key] == want, (key, outcome.state[key])

    return check


def _parts_before_error(want: Any, outcome: Outcome, run: CaseRun) -> None:
    assert outcome.error is not None, "the call was expected to fail"
    assert_parts_match(want, _own_parts(outcome, want), BlockIds())


def _streamed_sources(want: Any, outcome: Outcome, run: CaseRun) -> None:
    """The source parts the call's stream carried: the parts of a streaming call; for a
    generate-style call (which keeps no parts), the sources of every step of its result."""
    call = outcome.call
    if call["call"] == "generate" or call.get("mode") == "generate":
        sources = [s for step in _result(outcome).steps for s in step.sources]
    else:
        sources = [p for p in outcome.parts if isinstance(p, Source)]
    _assert_match(want, [_source_view(s) for s in sources])


def _content_text(want: Any, outcome: Outcome, run: CaseRun) -> None:
    # Our generate result keeps a step's text as one string: the blocks are compared joined.
    assert _result(outcome).steps[-1].text == "".join(want)


OUTCOME_CHECKS: dict[str, Callable[[Any, Outcome, CaseRun], None]] = {
    "text": lambda want, o, run: _assert_eq(_result(o).text, want),
    "text_contains": lambda want, o, run: _assert_in(
        want, "".join(s.text for s in _result(o).steps)
    ),
    "step_count": lambda want, o, run: _assert_eq(len(_result(o).steps), want),
    "tool_call_count": lambda want, o, run: _assert_eq(len(_tool_calls(o)), want),
    "tool_calls": lambda want, o, run: _assert_match(want, _tool_calls(o)),
    "finish_reason": lambda want, o, run: _assert_eq(_result(o).finish_reason, want),
    "raw_finish_reason": lambda want, o, run: _assert_eq(_result(o).raw_finish_reason, want),
    "usage": _usage,
    "provider_metadata": lambda want, o, run: _assert_eq(
        _result(o).steps[-1].provider_metadata, want
    ),
    "chat_id": lambda want, o, run: _assert_eq(_result(o).chat_id, want),
    "content_text": _content_text,
    "content_sources": lambda want, o, run: _assert_match(
        want, [_source_view(s) for s in _result(o).steps[-1].sources]
    ),
    "streamed_sources": _streamed_sources,
    "last_part": _last_part,
    "emits_error_part": lambda want, o, run: _assert_eq(
        any(isinstance(p, ErrorPart) for p in o.parts), want
    ),
    "ends_cleanly": lambda want, o, run: _assert_eq(o.done and o.error is None, want),
    "raised": lambda want, o, run: _assert_eq(o.done and o.error is not None, want),
    "error": lambda want, o, run: check_error(want, o.error),
    "dead_end": lambda want, o, run: check_error(
        {**want, "isinstance": {"CoderChatError": True}}, o.error
    ),
    "segment_settle": _segment_settle,
    "parts": lambda want, o, run: assert_parts_match(want, _own_parts(o, want), BlockIds()),
    "parts_before_error": _parts_before_error,
    "last_known_chat_id": _state("last_known_chat_id"),
    "chat_id_after": _state("chat_id_after"),
    "last_seen_message_id_after": _state("last_seen_message_id_after"),
    "anchored_turn_cursor": _state("anchored_turn_cursor"),
    "first_socket_closed": _state("first_socket_closed"),
}


def _assert_eq(got: Any, want: Any) -> None:
    assert strip_nulls(got) == strip_nulls(want), got


def _assert_in(needle: Any, haystack: str) -> None:
    assert needle in haystack, haystack


def _assert_match(want: Any, got: Any) -> None:
    assert matches(want, got), got


def _count(run: CaseRun, method: str, test: Callable[[str], bool]) -> int:
    return sum(1 for r in run.requests() if r.method == method and test(r.path.partition("?")[0]))


def _requests(want: dict[str, int], run: CaseRun) -> None:
    sent = [f"{r.method} {r.path}" for r in run.requests()]
    got = {key: sent.count(key) for key in want}
    assert got == want, sent


def _bodies(run: CaseRun, op: str) -> list[Any]:
    return [r.json for r in run.requests() if r.op == op]


def _create_chat_body(want: dict[str, Any], run: CaseRun) -> None:
    bodies = _bodies(run, "create_chat")
    assert bodies, "no chat was created"
    assert matches(want, bodies[0]), bodies[0]


def _paths_of(run: CaseRun, method: str, fragment: str) -> list[list[str]]:
    return [
        r.path.partition("?")[0][len(PREFIX) + 1 :].split("/")
        for r in run.requests()
        if r.method == method and fragment in r.path
    ]


def _dial_paths(run: CaseRun) -> list[str]:
    out = []
    for event in run.env.of("WsDialEvent"):
        url = urlsplit(event.url)
        out.append(url.path + (f"?{url.query}" if url.query else ""))
    return out


def _ws_errors(want: list[dict[str, Any]], run: CaseRun) -> None:
    # Messages compared case-insensitively: a reference corpus may record another socket
    # library's spelling of the same text.
    got = [{"attempt": e.attempt, "message": e.message.lower()} for e in run.env.of("WsErrorEvent")]
    assert got == [{**w, "message": w["message"].lower()} for w in want], got


def _backoffs(want: list[float], run: CaseRun) -> None:
    got = [e.backoff for e in run.env.of("WsRedialEvent")]
    assert [round(b, 6) for b in got] == [round(w, 6) for w in want], got


def _segment_events(want: list[dict[str, Any]], run: CaseRun) -> None:
    got = [e for e in run.env.events if e.type in ("segment:start", "segment:settle")]
    assert len(got) == len(want), got
    for w, event in zip(want, got, strict=True):
        assert _settle_matches(w, event), event


TRAFFIC_CHECKS: dict[str, Callable[[Any, CaseRun], None]] = {
    "requests": _requests,
    "interrupt_requests": lambda want, run: _assert_eq(
        _count(run, "POST", lambda p: p.endswith("/interrupt")), want
    ),
    "create_chat_requests": lambda want, run: _assert_eq(
        _count(run, "POST", lambda p: p == PREFIX), want
    ),
    "create_chat_body": _create_chat_body,
    "tool_results_bodies": lambda want, run: _assert_match(
        want, _bodies(run, "submit_tool_results")
    ),
    "tool_results_posts": lambda want, run: _assert_eq(
        _count(run, "POST", lambda p: p.endswith("/tool-results")), want
    ),
    "tool_inputs": lambda want, run: _assert_eq(run.tool_inputs, want),
    "interrupted_chats": lambda want, run: _assert_eq(
        [p[0] for p in _paths_of(run, "POST", "/interrupt")], want
    ),
    "get_messages_calls": lambda want, run: _assert_eq(
        _count(run, "GET", lambda p: p.endswith("/messages")), want
    ),
    "deleted_queue_entries": lambda want, run: _assert_eq(
        [[p[0], int(p[2])] for p in _paths_of(run, "DELETE", "/queue/")], want
    ),
    "client_ops": lambda want, run: _assert_eq(run.ops, want),
    "stream_after_ids": lambda want, run: _assert_eq(run.stream_after_ids, want),
    "dials": lambda want, run: _assert_eq(run.dial_count(), want),
    "ws_dial_events": lambda want, run: _assert_eq(len(run.env.of("WsDialEvent")), want),
    "socket_paths": lambda want, run: _assert_eq(_dial_paths(run), want),
    "redial_backoffs": _backoffs,
    "ws_close_events": lambda want, run: _assert_eq(len(run.env.of("WsCloseEvent")), want),
    "ws_error_events": _ws_errors,
    "first_socket_closed_at_end": lambda want, run: _assert_eq(run.socket0_closed(), want),
    "first_socket_closed_by_client": lambda want, run: _assert_eq(
        bool(run.driver.sockets) and run.driver.sockets[0].closed_by_client, want
    ),
    "segment_events": _segment_events,
}


def check_outcome(expect: dict[str, Any], outcome: Outcome, run: CaseRun) -> None:
    for key, want in expect.items():
        check = OUTCOME_CHECKS.get(key)
        assert check is not None, f"expected key {key!r} is not part of the call vocabulary"
        try:
            check(want, outcome, run)
        except AssertionError as exc:
            raise AssertionError(f"{key}: {exc}") from exc


def check_traffic(expect: dict[str, Any], run: CaseRun) -> None:
    for key, want in expect.items():
        check = TRAFFIC_CHECKS.get(key)
        assert check is not None, f"expected key {key!r} is not part of the traffic vocabulary"
        try:
            check(want, run)
        except AssertionError as exc:
            raise AssertionError(f"{key}: {exc}") from exc


def check_expectations(expect: dict[str, Any], run: CaseRun) -> None:
    """Every key of ``expect``: outcome keys apply to the last call, ``calls`` to the calls
    it names, the rest to the run's traffic (``at_checkpoint`` was checked when reached)."""
    assert run.order, "no call was started"
    last = run.order[-1]
    for key, want in expect.items():
        if key == "calls":
            for call_id, call_expect in want.items():
                assert call_id in run.outcomes, f"no call has the id {call_id!r}"
                check_outcome(call_expect, run.outcomes[call_id], run)
        elif key == "at_checkpoint":
            continue
        elif key in OUTCOME_CHECKS:
            check_outcome({key: want}, last, run)
        else:
            check_traffic({key: want}, run)
    # No part trace ever carries two finishes for one segment.
    for outcome in run.order:
        finishes = [p for p in outcome.parts if isinstance(p, Finish)]
        assert len(finishes) <= max(len(outcome.machine.steps), 1)
