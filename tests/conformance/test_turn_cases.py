"""Conformance: every ``turn-*.json`` case (FORMAT.md 4.7; state machines C-H; D25).

Each case runs the real session, turn and segment machines through ``tests/core_driver.py``:
no sockets, a fake clock for ``advanceMs``, the case's scripted REST answers (with the
unscripted defaults of D25), and either real ``StreamReader`` connections driven by the
case's ``timeline`` (``real-reader``) or the ``scripted-client`` stand-in stream. Cases our
design answers differently are listed in ``DEVIATIONS.md`` and asserted in the decided form.
"""

from __future__ import annotations

import pathlib
import re
from collections import Counter
from typing import Any

import pytest

from coder_proto import CoderChatError, CoderStreamError, DynamicTool, Finish
from coder_proto._agent.session import Session
from coder_proto._agent.session_state import SessionConfig
from coder_proto._agent.turn import Turn
from coder_proto._transport_events import TransportEventSink
from tests.core_driver import AbortError, CaseEnv, Driver, ai_sdk_prompt, rewrite

from .cases import cases, load
from .mapping import part_to_ts, strip_nulls, usage_to_ts

UPGRADE_STATUS = re.compile(r"unexpected server response: (\d{3})$", re.IGNORECASE)


def _config_tools(config: dict[str, Any]) -> tuple[DynamicTool, ...]:
    tools = []
    for name, spec in (config.get("tools") or {}).items():
        properties = {k: {"type": v} for k, v in (spec.get("inputSchema") or {}).items()}
        schema = {"type": "object", "properties": properties, "required": list(properties)}
        tools.append(
            DynamicTool(name=name, input_schema=schema, description=spec.get("description"))
        )
    return tuple(tools)


def _call_tools(call: dict[str, Any]) -> tuple[DynamicTool, ...] | None:
    if "tools" not in call:
        return None
    return tuple(
        DynamicTool(
            name=t["name"],
            input_schema=t.get("inputSchema") or {},
            description=t.get("description"),
        )
        for t in call["tools"]
        if t.get("type", "function") == "function"
    )


class Outcome:
    """How one call ended (or that it is still pending)."""

    def __init__(self, call: dict[str, Any], machine: Turn) -> None:
        self.call = call
        self.machine = machine
        self.result: Any = None
        self.error: BaseException | None = None
        self.done = False
        self.socket0_closed: bool | None = None

    def finish(self, run: CaseRun) -> None:
        self.done = True
        if self.machine.cancelled:
            self.error = run.cancel_reason
        elif self.machine.error is not None:
            self.error = self.machine.error
        else:
            self.result = self.machine.result()
        self.socket0_closed = run.socket0_closed()

    @property
    def parts(self) -> list[Any]:
        return list(self.machine.parts)


class CaseRun:
    def __init__(self, case: dict[str, Any]) -> None:
        spec = case["input"]
        config = spec.get("config") or {}
        self.spec = spec
        self.env = CaseEnv(
            rest=spec.get("rest"),
            transport=spec.get("transport", "real-reader"),
            stream_batches=spec.get("streamBatches"),
            stream_then=spec.get("streamThen"),
            organization_id=config.get("organizationId") or "org-1",
        )
        timeout_ms = config.get("requestTimeoutMs")
        self.session = Session(
            SessionConfig(
                base_url="https://coder.test",
                token="tok-secret",
                organization_id=config.get("organizationId"),
                instructions=config.get("instructions"),
                workspace_id=config.get("workspaceId"),
                mcp_server_ids=tuple(config.get("mcpServerIds") or ()),
                chat_id=config.get("chatId"),
                last_seen_message_id=config.get("lastSeenMessageId"),
                request_timeout=timeout_ms / 1000.0 if timeout_ms else None,
                tools=_config_tools(config),
            ),
            sink=TransportEventSink(self.env.sink, wall_clock=lambda: 0.0),
            reader_factory=self.env.reader_factory,
        )
        self.driver = Driver(
            self.session,
            http=self.env.http,
            tools=self.env.tools,
            auto_accept=self.env.transport != "real-reader",
        )
        self.queue = list(spec.get("calls") or [])
        self.outcomes: dict[str, Outcome] = {}
        self.order: list[Outcome] = []
        self.current: Outcome | None = None
        self.reached: set[str] = set()
        self.checkpoints: dict[str, Counter[str]] = {}
        self.cancel_reason: BaseException | None = None

    # -- running ----------------------------------------------------------------------------

    def dial_count(self) -> int:
        """Stream dials: WebSocket connections, or stand-in streams for ``scripted-client``."""
        if self.env.transport == "scripted-client":
            return len(self.env.readers)
        return len(self.driver.sockets)

    def socket0_closed(self) -> bool | None:
        if self.env.transport == "scripted-client":
            return self.env.readers[0].done if self.env.readers else None
        if not self.driver.sockets:
            return None
        sock = self.driver.sockets[0]
        return sock.closed_by_client or sock.ended

    def _start(self, call: dict[str, Any]) -> None:
        session = self.session
        prompt = ai_sdk_prompt(call["prompt"])
        now = self.driver.now
        kind = call["kind"]
        if kind == "agent.generate":
            machine = session.generate(prompt, now=now)
        else:
            mode = "generate" if kind == "doGenerate" else "stream"
            machine = session.segment(prompt, now=now, mode=mode, tools=_call_tools(call))
        outcome = Outcome(call, machine)
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
            after = self.queue[0].get("startsAfter")
            if after is not None and after not in self.reached:
                return
            self._start(self.queue.pop(0))

    def counts(self) -> Counter[str]:
        counter: Counter[str] = Counter()
        for request in self.driver.requests():
            counter[f"{request.method} {rewrite(request.path)}"] += 1
            if request.method == "POST" and request.path.endswith("/interrupt"):
                counter["interrupt"] += 1
        return counter

    def execute(self) -> None:
        if self.spec.get("transport") == "scripted-client":
            self._execute_scripted()
        else:
            self._execute_timeline()

    def _execute_scripted(self) -> None:
        while self.queue:
            self.progress()
            outcome = self.current
            assert outcome is not None
            signal = outcome.call.get("abortSignal") or {}
            if "timeoutMs" in signal:
                self.driver.advance(signal["timeoutMs"] / 1000.0)
                if not outcome.machine.done:
                    self.cancel_reason = TimeoutError("The operation was aborted due to timeout")
                    self.driver.cancel(self.cancel_reason)
            else:
                self._run_to_end(outcome.machine)
            self.progress()
        self.driver.drain_background()

    def _run_to_end(self, machine: Turn, limit: float = 600.0) -> None:
        end = self.driver.now + limit
        while not machine.done:
            due = self.driver.next_due()
            if due is None or due > end:
                return  # idle: the stream stays open
            self.driver.now = max(self.driver.now, due)
            self.driver.settle()

    def _execute_timeline(self) -> None:
        self.progress()
        for item in self.spec.get("timeline") or []:
            if "advanceMs" in item or "realTimeMs" in item:
                ms = item.get("advanceMs", item.get("realTimeMs", 0))
                self.driver.advance(ms / 1000.0)
            elif "ws" in item:
                sock = self.driver.sockets[item["ws"]]
                if "frame" in item:
                    sock.send_events(item["frame"])
                elif item.get("drop"):
                    sock.drop(item.get("code", 1006))
                elif "error" in item:
                    message = item["error"].get("message", "")
                    match = UPGRADE_STATUS.search(message)
                    if match:
                        sock.reject(int(match.group(1)))
                    else:
                        sock.fail(message)
                self.driver.settle()
            elif "checkpoint" in item:
                self.checkpoints[item["checkpoint"]] = self.counts()
                self.reached.add(item["checkpoint"])
            elif item.get("abort"):
                self.cancel_reason = AbortError("This operation was aborted")
                self.driver.cancel(self.cancel_reason)
            self.progress()
        self.driver.drain_background()
        self.progress()


# -- checking ---------------------------------------------------------------------------------


def _subset(want: Any, got: Any) -> bool:
    if isinstance(want, dict):
        return isinstance(got, dict) and all(_subset(v, got.get(k)) for k, v in want.items())
    if isinstance(want, list):
        return (
            isinstance(got, list)
            and len(want) == len(got)
            and all(_subset(w, g) for w, g in zip(want, got, strict=True))
        )
    return bool(want == got)


def _check_error(want: dict[str, Any], error: BaseException | None) -> None:
    assert error is not None, "the call was expected to fail"
    for key, value in want.items():
        if key == "name":
            assert type(error).__name__ == value
        elif key in ("retryable", "isRetryable"):
            assert getattr(error, "retryable", None) is value
        elif key == "kind":
            assert getattr(error, "kind", None) == value
        elif key == "chatId":
            assert getattr(error, "chat_id", None) == value
        elif key == "status":
            assert getattr(error, "status", None) == value
        elif key == "messageMatches":
            assert re.search(value, str(error)), str(error)
        elif key == "messagePrefix":
            assert str(error).startswith(value), str(error)
        elif key == "isCoderChatError":
            assert isinstance(error, CoderChatError) is value
        else:  # pragma: no cover - every key of the corpus is mapped
            raise AssertionError(f"unmapped error key {key!r}")


def _tool_calls(outcome: Outcome) -> list[dict[str, Any]]:
    result = outcome.result
    assert result is not None, outcome.error
    calls = [c for step in result.steps for c in step.tool_calls]
    return [strip_nulls(part_to_ts(c)) for c in calls]


def _check_outcome(key: str, want: Any, outcome: Outcome, run: CaseRun) -> None:
    if key == "error":
        _check_error(want, outcome.error)
        return
    if key == "isCoderChatError":
        assert isinstance(outcome.error, CoderChatError) is want
        return
    if key == "isAPICallError":
        # D25: isAPICallError maps to isinstance(e, CoderStreamError).
        assert isinstance(outcome.error, CoderStreamError) is want
        return
    if key == "socket0ClosedAfter":
        assert outcome.socket0_closed is want
        return
    result = outcome.result
    assert result is not None, f"{key}: the call failed with {outcome.error!r}"
    if key == "text":
        assert result.text == want
    elif key == "textContains":
        assert want in "".join(step.text for step in result.steps)
    elif key == "stepCount":
        assert len(result.steps) == want
    elif key == "chatId":
        assert result.chat_id == want
    elif key == "toolCallCount":
        assert len(_tool_calls(outcome)) == want
    elif key == "toolCalls":
        got = _tool_calls(outcome)
        assert len(got) == len(want), got
        assert all(_subset(w, g) for w, g in zip(want, got, strict=True)), got
    elif key == "finishReason":
        assert {"unified": result.finish_reason, "raw": result.raw_finish_reason} == want
    elif key == "usage":
        got = usage_to_ts(result.steps[-1].usage)
        assert _subset(want, got), got
    else:  # pragma: no cover - every key of the corpus is mapped
        raise AssertionError(f"unmapped outcome key {key!r}")


def _segments(run: CaseRun) -> list[dict[str, Any]]:
    out = []
    for event in run.env.events:
        if event.type in ("segment:start", "segment:settle"):
            view = {"type": event.type, "segment": event.segment}
            if event.type == "segment:settle":
                view["status"] = event.status
                view["finishReason"] = event.finish_reason
                view["error"] = event.error
            out.append(strip_nulls(view))
    return out


def check(expected: dict[str, Any], run: CaseRun) -> None:
    last = run.order[-1]
    counts = run.counts()
    for key, want in expected.items():
        if key in run.outcomes and isinstance(want, dict):
            for sub, value in want.items():
                _check_outcome(sub, value, run.outcomes[key], run)
        elif key == "createChatRequests":
            assert counts[f"POST {rewrite('/api/v2/chats')}"] == want
        elif key == "createChatRequest":
            body = next(r.json for r in run.driver.requests() if r.op == "create_chat")
            for field, value in want.items():
                if field == "unsafe_dynamic_tools_names":
                    assert [t["name"] for t in body.get("unsafe_dynamic_tools", [])] == value
                else:
                    assert body.get(field) == value, field
        elif key == "toolExecutions":
            assert run.env.tool_inputs == want
        elif key == "submittedToolResults":
            bodies = [r.json for r in run.driver.requests() if r.op == "submit_tool_results"]
            assert _subset_prefix(want, bodies), bodies
        elif key in ("dials", "sockets"):
            assert run.dial_count() == want
        elif key == "wsDials":
            assert len(run.env.of("WsDialEvent")) == want
        elif key == "chatIdAfter":
            assert run.session.chat_id == want
        elif key == "wsErrorEvents":
            got = [
                {"attempt": e.attempt, "message": e.message.lower()}
                for e in run.env.of("WsErrorEvent")
            ]
            assert got == [{**w, "message": w["message"].lower()} for w in want]
        elif key in ("wsCloseEvents", "wsCloses"):
            assert len(run.env.of("WsCloseEvent")) == want
        elif key == "redialBackoffsMs":
            assert [e.backoff * 1000 for e in run.env.of("WsRedialEvent")] == want
        elif key == "requestsAtCheckpoint":
            (snapshot,) = run.checkpoints.values()
            assert {k: snapshot[k] for k in want} == want
        elif key == "requests":
            assert {k: counts[k] for k in want} == want
        elif key == "toolResultsPosts":
            assert counts[f"POST {rewrite('/api/v2/chats/chat-1/tool-results')}"] == want
        elif key in ("socket0ClosedAtEnd", "socket0Closed"):
            assert run.socket0_closed() is want
        elif key == "interruptRequests":
            assert counts["interrupt"] == want
        elif key == "interrupted":
            got = [
                rewrite(r.path).split("/")[-2]
                for r in run.driver.requests()
                if r.method == "POST" and r.path.endswith("/interrupt")
            ]
            assert got == want
        elif key == "segments":
            got = _segments(run)
            assert len(got) == len(want), got
            assert all(_subset(w, g) for w, g in zip(want, got, strict=True)), got
        else:
            _check_outcome(key, want, last, run)


def _subset_prefix(want: list[Any], got: list[Any]) -> bool:
    return len(got) >= len(want) and all(_subset(w, g) for w, g in zip(want, got, strict=False))


@pytest.mark.parametrize("path", cases("turn"))
def test_turn_case(path: pathlib.Path) -> None:
    case = load(path)
    assert case["kind"] == "turn"
    run = CaseRun(case)
    run.execute()
    check(case["expected"], run)
    # No part trace ever carries two finishes for one segment.
    for outcome in run.order:
        finishes = [p for p in outcome.parts if isinstance(p, Finish)]
        assert len(finishes) <= max(len(outcome.machine.steps), 1)
