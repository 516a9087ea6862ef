"""Reading conformance cases written in the reference client's format, into ours.

The cases under ``cases/`` were produced once by this module from a corpus derived from the
TypeScript reference client (``@coder/ai-sdk-agent``); ``CODER_CONFORMANCE_DIR`` points the
runners at such a corpus directly, and every file of it goes through ``convert_case`` on the way
in. The reference format uses the TypeScript client's names (camelCase, milliseconds, the AI
SDK's part and prompt shapes); ours uses the library's (snake_case, seconds, our part dicts,
our prompt messages, our request paths under ``/api/v2/chats``). ``README.md`` beside this file
describes our format.

Every key of the reference format is either mapped or rejected: a key this module does not know
raises ``ConversionError`` naming the key, where it was found and the file, so a new kind of
expectation is a visible gap, never a silent pass.

    python -m tests.conformance.convert SOURCE_DIR [--out DIR]

rewrites ``DIR/<family>/<name>.json`` (default: ``cases/`` beside this file) from every
``<family>-<name>.json`` in ``SOURCE_DIR``, keeping the ``about`` line of a case that is already
there.
"""

from __future__ import annotations

import argparse
import json
import pathlib
import re
import sys
from collections.abc import Callable
from typing import Any

__all__ = [
    "FAMILIES",
    "ConversionError",
    "convert_case",
    "convert_file",
    "dump_case",
    "main",
]

#: Case families, in the order the reference corpus lists them.
FAMILIES = ("translate", "dedup", "usage", "history", "prefix", "promotion", "turn")

#: The chat prefix of the reference corpus, and ours.
REFERENCE_PREFIX = "/api/experimental/chats"
PREFIX = "/api/v2/chats"
#: The chat every unscripted request of a session case answers with.
STUB_CHAT_ID = "chat-1"
#: Close code 1006: the connection ended without a close frame (a drop).
ABNORMAL_CLOSURE = 1006

_MISSING = object()
_UPGRADE_REJECTED = re.compile(r"^unexpected server response: (\d{3})$", re.IGNORECASE)


class ConversionError(Exception):
    """A reference case this module cannot map: ``where`` is the path to the key inside the
    case (``expected.fooBar``), ``source`` the file."""

    def __init__(self, source: str, where: str, problem: str) -> None:
        super().__init__(f"{source}: {where}: {problem}")
        self.source = source
        self.where = where
        self.problem = problem


class _Obj:
    """A JSON object being mapped: each key must be taken; ``done()`` rejects the rest."""

    def __init__(self, value: Any, where: str, source: str) -> None:
        if not isinstance(value, dict):
            raise ConversionError(source, where, f"expected an object, got {value!r}")
        self.value = value
        self.where = where
        self.source = source
        self.taken: set[str] = set()

    def __contains__(self, key: str) -> bool:
        return key in self.value

    def take(self, key: str, default: Any = _MISSING) -> Any:
        if key not in self.value:
            if default is _MISSING:
                raise self.error(key, "missing")
            return default
        self.taken.add(key)
        return self.value[key]

    def obj(self, key: str, default: Any = _MISSING) -> _Obj:
        return _Obj(self.take(key, default), self.at(key), self.source)

    def at(self, key: str | int) -> str:
        return f"{self.where}[{key}]" if isinstance(key, int) else f"{self.where}.{key}"

    def error(self, key: str, problem: str) -> ConversionError:
        return ConversionError(self.source, self.at(key), problem)

    def fail(self, problem: str) -> ConversionError:
        return ConversionError(self.source, self.where, problem)

    def done(self) -> None:
        for key in self.value:
            if key not in self.taken:
                raise self.error(key, "unknown key (no mapping to this library's format)")


def _seconds(ms: Any, where: _Obj, key: str) -> float:
    if isinstance(ms, bool) or not isinstance(ms, int | float):
        raise where.error(key, f"expected milliseconds, got {ms!r}")
    return ms / 1000


def _path(path: str) -> str:
    """A request path (or ``METHOD path`` key) under our chat prefix."""
    return path.replace(REFERENCE_PREFIX, PREFIX)


# -- values shared by several families ----------------------------------------------------------

_USAGE_KEYS = {
    "inputTokens": "input_tokens",
    "noCacheTokens": "no_cache_tokens",
    "cacheReadTokens": "cache_read_tokens",
    "cacheWriteTokens": "cache_write_tokens",
    "outputTokens": "output_tokens",
    "reasoningTokens": "reasoning_tokens",
    "textTokens": "text_tokens",
    "totalTokens": "total_tokens",
    "raw": "raw",  # the wire usage: already snake_case
}


def _usage(value: Any, where: str, source: str) -> Any:
    if value is None:
        return None
    obj = _Obj(value, where, source)
    out = {ours: obj.take(ts) for ts, ours in _USAGE_KEYS.items() if ts in obj}
    obj.done()
    return out


def _finish_reason(value: Any, where: str, source: str) -> dict[str, Any]:
    """``{unified, raw}`` -> our ``finish_reason`` / ``raw_finish_reason`` pair; the unified
    reason alone (a string) -> ``finish_reason`` only."""
    if isinstance(value, str):
        return {"finish_reason": value}
    obj = _Obj(value, where, source)
    out = {"finish_reason": obj.take("unified")}
    if "raw" in obj:
        out["raw_finish_reason"] = obj.take("raw")
    obj.done()
    return out


#: Error names of the reference that are a caller's own cancellation in our runners.
_ERROR_NAMES = {"AbortError": "CallerCancelled"}


def _error_name(name: Any) -> Any:
    return _ERROR_NAMES.get(name, name)


def _error(value: Any, where: str, source: str) -> dict[str, Any]:
    """An expected raised error: our exception's class name and attributes."""
    obj = _Obj(value, where, source)
    out: dict[str, Any] = {}
    if "name" in obj:
        out["type"] = _error_name(obj.take("name"))
    for ts, ours in (
        ("kind", "kind"),
        ("chatId", "chat_id"),
        ("status", "status"),
        ("reason", "reason"),
        ("messageMatches", "message_matches"),
        ("messagePrefix", "message_prefix"),
    ):
        if ts in obj:
            out[ours] = obj.take(ts)
    for ts in ("retryable", "isRetryable"):
        if ts in obj:
            value = obj.take(ts)
            if out.get("retryable", value) != value:
                raise obj.error(ts, "contradicts the other retryable flag")
            out["retryable"] = value
    if "isCoderChatError" in obj:
        out.setdefault("isinstance", {})["CoderChatError"] = obj.take("isCoderChatError")
    obj.done()
    return out


# -- output parts --------------------------------------------------------------------------------

#: Reference part field -> ours, per part type (``type`` is the same string on both sides).
_PART_FIELDS: dict[str, dict[str, str]] = {
    "text-start": {"id": "id"},
    "text-delta": {"id": "id", "delta": "delta"},
    "text-end": {"id": "id"},
    "reasoning-start": {"id": "id"},
    "reasoning-delta": {"id": "id", "delta": "delta"},
    "reasoning-end": {"id": "id"},
    "tool-input-start": {
        "id": "tool_call_id",
        "toolName": "tool_name",
        "providerExecuted": "provider_executed",
        "dynamic": "dynamic",
    },
    "tool-input-end": {"id": "tool_call_id"},
    "tool-call": {
        "toolCallId": "tool_call_id",
        "toolName": "tool_name",
        "input": "input",
        "providerExecuted": "provider_executed",
        "dynamic": "dynamic",
    },
    "tool-result": {
        "toolCallId": "tool_call_id",
        "toolName": "tool_name",
        "result": "result",
        "isError": "is_error",
        "dynamic": "dynamic",
    },
    "source": {"sourceType": "source_type", "id": "id", "url": "url", "title": "title"},
    "stream-start": {"warnings": "warnings"},
}
#: Flags the reference leaves out when false; ours always carries them.
_FLAGS = {
    "tool-input-start": ("provider_executed", "dynamic"),
    "tool-call": ("provider_executed", "dynamic"),
    "tool-result": ("is_error", "dynamic"),
}
_ERROR_PART_FIELDS = {
    "name": "type",
    "message": "message",
    "kind": "kind",
    "retryable": "retryable",
    "statusCode": "status_code",
    "provider": "provider",
}


def _part(value: Any, where: str, source: str, *, subset: bool = False) -> dict[str, Any]:
    """A part in our shape. A whole trace's part gets the flags the reference leaves out
    when false; a ``subset`` (a part stated by only some of its keys) gets only what it says."""
    obj = _Obj(value, where, source)
    kind = obj.take("type")
    if kind == "finish":
        out = {
            "type": "finish",
            **_finish_reason(obj.take("finishReason"), obj.at("finishReason"), source),
            "usage": _usage(obj.take("usage"), obj.at("usage"), source),
            "provider_metadata": obj.take("providerMetadata", None),
        }
    elif kind == "error":
        err = obj.obj("error")
        out = {
            "type": "error",
            "error": {ours: err.take(ts) for ts, ours in _ERROR_PART_FIELDS.items() if ts in err},
        }
        err.done()
    elif kind in _PART_FIELDS:
        out = {"type": kind}
        for ts, ours in _PART_FIELDS[kind].items():
            if ts in obj:
                out[ours] = obj.take(ts)
        for flag in () if subset else _FLAGS.get(kind, ()):
            out.setdefault(flag, False)
    else:
        raise obj.error("type", f"unknown part type {kind!r}")
    obj.done()
    return out


def _parts(value: Any, where: str, source: str) -> list[dict[str, Any]]:
    if not isinstance(value, list):
        raise ConversionError(source, where, "expected a list of parts")
    return [_part(p, f"{where}[{i}]", source) for i, p in enumerate(value)]


def _tool_call_subset(value: Any, where: str, source: str) -> dict[str, Any]:
    obj = _Obj(value, where, source)
    fields = _PART_FIELDS["tool-call"]
    out = {ours: obj.take(ts) for ts, ours in fields.items() if ts in obj}
    if "type" in obj and obj.take("type") != "tool-call":
        raise obj.error("type", "a tool call expectation must be a tool-call")
    obj.done()
    return out


# -- translator options and wire entries ---------------------------------------------------------


def _queued_submission(value: Any, where: str, source: str) -> Any:
    if value is None:
        return None
    obj = _Obj(value, where, source)
    out = {"id": obj.take("id", None), "content": obj.take("content", None)}
    obj.done()
    return out


def _translator_options(value: Any, where: str, source: str) -> dict[str, Any]:
    obj = _Obj(value, where, source)
    out: dict[str, Any] = {}
    for ts, ours in (
        ("dynamicToolNames", "dynamic_tool_names"),
        ("turnCursor", "turn_cursor"),
        ("submittedToolCallIds", "submitted_tool_call_ids"),
    ):
        if ts in obj:
            out[ours] = obj.take(ts)
    if "queuedSubmission" in obj:
        out["queued_submission"] = _queued_submission(
            obj.take("queuedSubmission"), obj.at("queuedSubmission"), source
        )
    obj.done()
    return out


def _connection_end(obj: _Obj) -> dict[str, Any]:
    """``{drop: true, code}``: 1006 is a drop (no close frame), any other code a server close
    frame with that code."""
    if obj.take("drop") is not True:
        raise obj.error("drop", "expected true")
    code = obj.take("code", ABNORMAL_CLOSURE)
    return {"drop": True} if code == ABNORMAL_CLOSURE else {"close": code}


def _translator_events(value: Any, where: str, source: str) -> list[Any]:
    """Wire events stay as the server sends them; a ``drop`` marker (documentation at this
    level: the reader below already redialed) keeps its place."""
    out = []
    for i, item in enumerate(value):
        if isinstance(item, dict) and "type" in item:
            out.append(item)
            continue
        obj = _Obj(item, f"{where}[{i}]", source)
        out.append(_connection_end(obj))
        obj.done()
    return out


# -- translate -----------------------------------------------------------------------------------

_PROCEDURES = {
    "run": "run",
    "ingest-each": "ingest_each",
    "model-loop": "model_loop",
    "ingest-each-then-finish": "ingest_each_then_finish",
    "segments": "segments",
}


def _procedure(obj: _Obj) -> str:
    value = obj.take("procedure")
    if value not in _PROCEDURES:
        raise obj.error("procedure", f"unknown procedure {value!r}")
    return _PROCEDURES[value]


def _kind_tagged(value: Any, where: str, source: str) -> list[list[str]]:
    out = []
    for i, item in enumerate(value):
        kind, sep, delta = str(item).partition(":")
        if not sep or kind not in ("text", "reasoning"):
            raise ConversionError(source, f"{where}[{i}]", f"not a kind-tagged delta: {item!r}")
        out.append([kind, delta])
    return out


def _trace_expectations(obj: _Obj, source: str, extra: dict[str, Callable[..., Any]]) -> dict:
    """The expected keys of a translator trace (translate, usage and translator-level
    promotion cases), in our names."""
    same: dict[str, str] = {
        "textBlocks": "text_blocks",
        "reasoningBlocks": "reasoning_blocks",
        "text": "text",
        "reasoning": "reasoning",
        "toolCallCount": "tool_call_count",
        "toolResultCount": "tool_result_count",
        "toolCallIds": "tool_call_ids",
        "terminalStatusAfterEach": "terminal_status_after_each",
        "lastEventPartTypes": "last_event_part_types",
        "providerMetadata": "provider_metadata",
        "raw": "raw",
        "anchoredTurnCursor": "anchored_turn_cursor",
    }
    out: dict[str, Any] = {}
    for key in list(obj.value):
        at = obj.at(key)
        if key in extra:
            out.update(extra[key](obj.take(key), at))
        elif key in same:
            out[same[key]] = obj.take(key)
        elif key == "parts":
            out["parts"] = _parts(obj.take(key), at, source)
        elif key == "perEvent":
            value = obj.take(key)
            out["per_event"] = [_parts(p, f"{at}[{i}]", source) for i, p in enumerate(value)]
        elif key == "finish":
            out["finish"] = _parts(obj.take(key), at, source)
        elif key == "finishReason":
            out.update(_finish_reason(obj.take(key), at, source))
        elif key == "usage":
            out["usage"] = _usage(obj.take(key), at, source)
        elif key == "kindTaggedDeltas":
            out["kind_tagged_deltas"] = _kind_tagged(obj.take(key), at, source)
        elif key == "deadEnd":
            out["dead_end"] = _error(obj.take(key), at, source)
        elif key == "error":
            out["error"] = _error(obj.take(key), at, source)
    obj.done()
    return out


def _translate(case: _Obj) -> tuple[dict[str, Any], dict[str, Any]]:
    src = case.source
    given = case.obj("input")
    out_given = {
        "procedure": _procedure(given),
        "translator": _translator_options(given.take("options"), given.at("options"), src),
        "events": _translator_events(given.take("events"), given.at("events"), src),
    }
    given.done()
    return out_given, _trace_expectations(case.obj("expected"), src, {})


# -- usage ---------------------------------------------------------------------------------------

_CURSOR_FROM_PREVIOUS = re.compile(r"^maxMessageId of segment (\d+) \(=(\d+)\)$")


def _segment_cursor(value: Any, where: str, source: str, index: int) -> Any:
    """An int, or "the previous segment's highest message id (= K)"."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value
    match = _CURSOR_FROM_PREVIOUS.match(str(value))
    if match is None or int(match.group(1)) != index:
        raise ConversionError(source, where, f"unknown segment cursor {value!r}")
    return {"previous_segment_max_message_id": int(match.group(2))}


def _usage_case(case: _Obj) -> tuple[dict[str, Any], dict[str, Any]]:
    src = case.source
    given = case.obj("input")
    level = given.take("level")
    out_given: dict[str, Any] = {"level": level, "procedure": _procedure(given)}
    out_given["translator"] = _translator_options(given.take("options"), given.at("options"), src)
    if level == "segment":
        out_given["events"] = _translator_events(given.take("events"), given.at("events"), src)
    elif level == "turn":
        segments = []
        for i, raw in enumerate(given.take("segments")):
            seg = _Obj(raw, given.at("segments") + f"[{i}]", src)
            kind = seg.take("kind")
            if kind not in ("new-turn", "resume"):
                raise seg.error("kind", f"unknown segment kind {kind!r}")
            segments.append(
                {
                    "kind": kind.replace("-", "_"),
                    "turn_cursor": _segment_cursor(
                        seg.take("turnCursor"), seg.at("turnCursor"), src, i
                    ),
                    "submitted_tool_call_ids": seg.take("submittedToolCallIds", []),
                    "events": _translator_events(seg.take("events"), seg.at("events"), src),
                }
            )
            seg.done()
        out_given["segments"] = segments
    else:
        raise given.error("level", f"unknown usage level {level!r}")
    given.done()

    def steps(value: Any, where: str) -> dict[str, Any]:
        out = []
        for i, raw in enumerate(value):
            step = _Obj(raw, f"{where}[{i}]", src)
            out.append(_trace_expectations(step, src, {}))
        return {"steps": out}

    def turn_finish_reason(value: Any, where: str) -> dict[str, Any]:
        if isinstance(value, str):  # a turn's finish reason, without the raw status
            return {"finish_reason": value}
        return _finish_reason(value, where, src)

    extra: dict[str, Callable[..., Any]] = {
        "steps": steps,
        "turnUsage": lambda value, where: {"turn_usage": _usage(value, where, src)},
        "finalText": lambda value, where: {"final_text": value},
        "stepCount": lambda value, where: {"step_count": value},
        "finishReason": turn_finish_reason,
    }
    return out_given, _trace_expectations(case.obj("expected"), src, extra)


# -- dedup ---------------------------------------------------------------------------------------


def _dedup(case: _Obj) -> tuple[dict[str, Any], dict[str, Any]]:
    src = case.source
    given = case.obj("input")
    wire = []
    for i, raw in enumerate(given.take("wire")):
        entry = _Obj(raw, given.at("wire") + f"[{i}]", src)
        if "frame" in entry:
            wire.append({"frame": entry.take("frame")})
        elif "drop" in entry:
            wire.append(_connection_end(entry))
        elif "advanceMs" in entry:
            wire.append({"advance": _seconds(entry.take("advanceMs"), entry, "advanceMs")})
        entry.done()
    out_given = {
        "after_id": given.take("afterId"),
        "dynamic_tool_names": given.take("dynamicToolNames"),
        "wire": wire,
    }
    given.done()

    expected = case.obj("expected")
    verdicts = []
    for i, raw in enumerate(expected.take("verdicts")):
        verdict = _Obj(raw, expected.at("verdicts") + f"[{i}]", src)
        out = {"attempt": verdict.take("attempt"), "type": verdict.take("type")}
        for key in ("history_version", "generation_attempt", "seq"):
            if key in verdict:
                out[key] = verdict.take(key)
        if "messageId" in verdict:
            out["message_id"] = verdict.take("messageId")
        out["forwarded"] = verdict.take("forwarded")
        out["progress"] = verdict.take("progress")
        verdict.done()
        verdicts.append(out)
    redials = []
    for i, raw in enumerate(expected.take("redials")):
        redial = _Obj(raw, expected.at("redials") + f"[{i}]", src)
        redials.append(
            {
                "attempt": redial.take("attempt"),
                "consecutive_failures": redial.take("consecutiveFailures"),
                "max_consecutive_failures": redial.take("maxConsecutiveFailures"),
                "backoff": _seconds(redial.take("backoffMs"), redial, "backoffMs"),
            }
        )
        redial.done()
    reader_error = expected.take("readerError")
    out_expected: dict[str, Any] = {
        "verdicts": verdicts,
        "redials": redials,
        "reader_error": None
        if reader_error is None
        else _error(reader_error, expected.at("readerError"), src),
    }
    turn = expected.take("turn")
    if turn is None:
        out_expected["turn"] = None
    else:
        turn_obj = _Obj(turn, expected.at("turn"), src)
        out_expected["turn"] = _trace_expectations(turn_obj, src, {})
    if "sockets" in expected:
        out_expected["dials"] = expected.take("sockets")
    if "interruptRequests" in expected:
        out_expected["interrupt_requests"] = expected.take("interruptRequests")
    expected.done()
    return out_given, out_expected


# -- history -------------------------------------------------------------------------------------


def _history(case: _Obj) -> tuple[dict[str, Any], dict[str, Any]]:
    given = case.obj("input")
    options = given.take("options")
    template = None
    if options is not None:
        opts = _Obj(options, given.at("options"), case.source)
        template = opts.take("fileUrlTemplate", None)
        opts.done()
    out_given = {"messages": given.take("messages"), "file_url_template": template}
    given.done()
    expected = case.obj("expected")
    # The UI message shape is the one ``UIMessage.to_json()`` produces (the AI SDK's).
    out_expected = {"ui_messages": expected.take("uiMessages")}
    expected.done()
    return out_given, out_expected


# -- prefix --------------------------------------------------------------------------------------

_PREFIX_OPS = {"getChat": "get_chat", "streamEvents": "stream_events", "watchChats": "watch_chats"}


def _prefix(case: _Obj) -> tuple[dict[str, Any], dict[str, Any]]:
    src = case.source
    given = case.obj("input")
    calls = []
    for i, raw in enumerate(given.take("calls")):
        call = _Obj(raw, given.at("calls") + f"[{i}]", src)
        op = call.take("op")
        if op not in _PREFIX_OPS:
            raise call.error("op", f"unknown operation {op!r}")
        calls.append({"op": _PREFIX_OPS[op], "chat_id": call.take("chatId")})
        call.done()
    responses = {}
    for route, answers in given.take("responses").items():
        responses[route] = ["network_error" if a == "network-error" else a for a in answers]
    given.done()

    expected = case.obj("expected")
    out: dict[str, Any] = {"requests": expected.take("requests")}
    if "lockedPrefix" in expected:
        out["locked_prefix"] = expected.take("lockedPrefix")
    if "lockedPrefixAfterCall" in expected:
        out["locked_prefix_after_call"] = expected.take("lockedPrefixAfterCall")
    if "results" in expected:
        results = []
        for i, raw in enumerate(expected.take("results")):
            if raw == "ok":
                results.append("ok")
                continue
            item = _Obj(raw, expected.at("results") + f"[{i}]", src)
            err = item.obj("error")
            mapped: dict[str, Any] = {}
            if "kind" in err:
                kind = err.take("kind")
                if kind != "network":
                    raise err.error("kind", f"unknown error kind {kind!r}")
                mapped["type"] = "CoderNetworkError"
            if "name" in err:
                mapped["type"] = err.take("name")
            if "status" in err:
                mapped["status"] = err.take("status")
            if "path" in err:  # the request the error belongs to, literally (no remapping)
                mapped["path"] = err.take("path")
            err.done()
            item.done()
            results.append({"error": mapped})
        out["results"] = results
    if "wsUrl" in expected:
        out["stream_url"] = expected.take("wsUrl")
    expected.done()
    return {"calls": calls, "responses": responses}, out


# -- session cases: turn and model-level promotion ------------------------------------------------

_CONFIG_KEYS = {
    "organizationId": "organization_id",
    "chatId": "chat_id",
    "workspaceId": "workspace_id",
    "lastSeenMessageId": "last_seen_message_id",
    "instructions": "instructions",
    "mcpServerIds": "mcp_server_ids",
}
_TOOL_RETURNS = re.compile(r"^returns \{(.*)\}$")


def _tool_output(text: Any, where: str, source: str) -> dict[str, Any]:
    """``"returns {city, tempC: 21}"``: the tool takes any input and returns an object of
    exactly those keys, a bare key's value taken from the input, the others literal."""
    match = _TOOL_RETURNS.match(str(text))
    if match is None:
        raise ConversionError(source, where, f"unknown tool behaviour {text!r}")
    from_input: list[str] = []
    literal: dict[str, Any] = {}
    for item in (i.strip() for i in match.group(1).split(",")):
        name, sep, value = (part.strip() for part in item.partition(":"))
        if not re.fullmatch(r"[A-Za-z_$][\w$]*", name):
            raise ConversionError(source, where, f"not a key: {item!r}")
        if not sep:
            from_input.append(name)
            continue
        try:
            literal[name] = json.loads(value)
        except ValueError as exc:
            raise ConversionError(source, where, f"not a JSON literal: {value!r}") from exc
    out: dict[str, Any] = {}
    if from_input:
        out["from_input"] = from_input
    if literal:
        out["literal"] = literal
    return out


def _config(value: Any, where: str, source: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """Session settings, and the behaviour of the configured client tools."""
    obj = _Obj(value, where, source)
    out: dict[str, Any] = {}
    outputs: dict[str, Any] = {}
    for ts, ours in _CONFIG_KEYS.items():
        if ts in obj:
            out[ours] = obj.take(ts)
    if "requestTimeoutMs" in obj:
        ms = obj.take("requestTimeoutMs")
        out["request_timeout"] = None if ms is None else _seconds(ms, obj, "requestTimeoutMs")
    if "tools" in obj:
        tools = []
        for name, raw in obj.take("tools").items():
            spec = _Obj(raw, obj.at("tools") + f".{name}", source)
            shorthand = spec.take("inputSchema", {}) or {}
            properties = {k: {"type": v} for k, v in shorthand.items()}
            tool: dict[str, Any] = {
                "name": name,
                "input_schema": {
                    "type": "object",
                    "properties": properties,
                    "required": list(properties),
                },
            }
            if "description" in spec:
                tool["description"] = spec.take("description")
            tools.append(tool)
            if "execute" in spec:
                outputs[name] = _tool_output(spec.take("execute"), spec.at("execute"), source)
            spec.done()
        out["tools"] = tools
    obj.done()
    return out, outputs


def _call_tools(value: Any, where: str, source: str) -> list[dict[str, Any]]:
    tools = []
    for i, raw in enumerate(value):
        spec = _Obj(raw, f"{where}[{i}]", source)
        if spec.take("type", "function") != "function":
            raise spec.error("type", "only function tools can be declared")
        tool = {"name": spec.take("name"), "input_schema": spec.take("inputSchema", {})}
        if "description" in spec:
            tool["description"] = spec.take("description")
        spec.done()
        tools.append(tool)
    return tools


def _tool_output_value(value: Any, where: str, source: str) -> tuple[Any, bool]:
    """An AI SDK tagged tool output as the wire value and error flag the library submits."""
    obj = _Obj(value, where, source)
    kind = obj.take("type")
    if kind in ("text", "json", "content"):
        result = (obj.take("value"), False)
    elif kind in ("error-text", "error-json"):
        result = (obj.take("value"), True)
    elif kind == "execution-denied":
        denied = {"execution_denied": True}
        if "reason" in obj:
            denied["reason"] = obj.take("reason")
        result = (denied, True)
    else:
        raise obj.error("type", f"unknown tool output type {kind!r}")
    obj.done()
    return result


def _prompt(value: Any, where: str, source: str) -> Any:
    """An AI SDK prompt as our prompt messages (system, user, assistant and tool)."""
    if isinstance(value, str):
        return value
    messages = []
    for i, raw in enumerate(value):
        msg = _Obj(raw, f"{where}[{i}]", source)
        role = msg.take("role")
        content = msg.take("content")
        if role == "system":
            messages.append({"role": "system", "content": content})
        elif role in ("user", "assistant", "tool"):
            parts = []
            for j, raw_part in enumerate(content):
                part = _Obj(raw_part, msg.at("content") + f"[{j}]", source)
                parts.append(_prompt_part(role, part))
                part.done()
            messages.append({"role": role, "content": parts})
        else:
            raise msg.error("role", f"unknown role {role!r}")
        msg.done()
    return messages


def _prompt_part(role: str, part: _Obj) -> dict[str, Any]:
    kind = part.take("type")
    if role == "user" and kind == "text":
        return {"type": "text", "text": part.take("text")}
    if role == "user" and kind == "file":
        out: dict[str, Any] = {"type": "file"}
        data = part.take("data", None)
        if data is not None:
            blob = _Obj(data, part.at("data"), part.source)
            if blob.take("type") != "data":
                raise blob.error("type", "only inline data can be converted")
            out["data_base64"] = blob.take("base64")
            blob.done()
        if "mediaType" in part:
            out["media_type"] = part.take("mediaType")
        if "filename" in part:
            out["filename"] = part.take("filename")
        if "providerOptions" in part:
            options = part.obj("providerOptions")
            coder = options.obj("coder")
            out["file_id"] = coder.take("fileId")
            coder.done()
            options.done()
        return out
    if role == "assistant" and kind == "tool-call":
        return {
            "type": "tool-call",
            "tool_call_id": part.take("toolCallId"),
            "tool_name": part.take("toolName"),
            "input": part.take("input"),
        }
    if role == "assistant" and kind == "text":
        return {"type": "text", "text": part.take("text")}
    if role == "tool" and kind == "tool-result":
        output, is_error = _tool_output_value(part.take("output"), part.at("output"), part.source)
        return {
            "tool_call_id": part.take("toolCallId"),
            "tool_name": part.take("toolName"),
            "output": output,
            "is_error": is_error,
        }
    raise part.error("type", f"unknown {role} content type {kind!r}")


_CALL_KINDS = {
    "doStream": {"call": "segment", "mode": "stream"},
    "doGenerate": {"call": "segment", "mode": "generate"},
    "agent.generate": {"call": "generate"},
    "new-turn": {"call": "segment", "mode": "stream"},
}


def _calls(value: Any, where: str, source: str) -> list[dict[str, Any]]:
    calls = []
    for i, raw in enumerate(value):
        call = _Obj(raw, f"{where}[{i}]", source)
        kind = call.take("kind")
        if kind not in _CALL_KINDS:
            raise call.error("kind", f"unknown call kind {kind!r}")
        out: dict[str, Any] = {}
        if "id" in call:
            out["id"] = call.take("id")
        out.update(_CALL_KINDS[kind])
        out["prompt"] = _prompt(call.take("prompt"), call.at("prompt"), source)
        if "tools" in call:
            out["tools"] = _call_tools(call.take("tools"), call.at("tools"), source)
        if "startsAfter" in call:
            out["starts_after"] = call.take("startsAfter")
        if "abortSignal" in call:
            signal = call.obj("abortSignal")
            out["cancel_after"] = _seconds(signal.take("timeoutMs"), signal, "timeoutMs")
            signal.done()
        # ``abortable``: the reference test handed the call an abort signal; every call of
        # ours can be cancelled, so the flag carries nothing.
        call.take("abortable", None)
        call.done()
        calls.append(out)
    return calls


def _timeline(value: Any, where: str, source: str) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for i, raw in enumerate(value):
        item = _Obj(raw, f"{where}[{i}]", source)
        if "advanceMs" in item:
            out.append({"advance": _seconds(item.take("advanceMs"), item, "advanceMs")})
        elif "realTimeMs" in item:  # the source waited on real timers; ours are all fake
            out.append({"advance": _seconds(item.take("realTimeMs"), item, "realTimeMs")})
        elif "checkpoint" in item:
            out.append({"checkpoint": item.take("checkpoint")})
        elif "abort" in item:
            if item.take("abort") is not True:
                raise item.error("abort", "expected true")
            out.append({"cancel": True})
        elif "ws" in item:
            entry: dict[str, Any] = {"socket": item.take("ws")}
            if "frame" in item:
                entry["frame"] = item.take("frame")
            elif "drop" in item:
                entry.update(_connection_end(item))
            elif "error" in item:
                err = item.obj("error")
                message = err.take("message")
                err.done()
                match = _UPGRADE_REJECTED.match(message)
                if match:
                    entry["reject"] = int(match.group(1))
                else:
                    entry["fail"] = message
            else:
                raise item.fail("a socket entry needs frame, drop or error")
            out.append(entry)
        else:
            raise item.fail(f"unknown timeline entry {raw!r}")
        item.done()
    return out


def _reply(value: Any, where: str, source: str) -> dict[str, Any]:
    """A scripted REST answer: ``{status, body, delay}``, ``{hang: true}`` or a bare body."""
    if isinstance(value, dict) and (value.get("hang") or value.get("hangUntilAbort")):
        obj = _Obj(value, where, source)
        obj.take("hang", None)
        obj.take("hangUntilAbort", None)
        obj.done()
        return {"hang": True}
    if isinstance(value, dict) and (isinstance(value.get("status"), int) or "delayMs" in value):
        obj = _Obj(value, where, source)
        out = {"status": obj.take("status", 200), "body": obj.take("body", None)}
        if "delayMs" in obj:
            out["delay"] = _seconds(obj.take("delayMs"), obj, "delayMs")
        obj.done()
        return out
    return {"status": 200, "body": value}


def _rest(value: Any, where: str, source: str, chat_id: str) -> dict[str, Any]:
    """Scripted REST answers keyed by ``METHOD path[?query]`` under our prefix; a list
    answers successive requests (the last one repeats)."""
    named = {
        "GET messages": f"GET {PREFIX}/{chat_id}/messages",
        "getMessages(limit=1)": f"GET {PREFIX}/{chat_id}/messages?limit=1",
        "createChat": f"POST {PREFIX}",
        "createChatMessage": f"POST {PREFIX}/{chat_id}/messages",
    }
    obj = _Obj(value, where, source)
    out: dict[str, Any] = {}
    for key in list(obj.value):
        if key in named:
            route = named[key]
        elif re.match(r"^(GET|POST|PUT|PATCH|DELETE) /", key):
            route = _path(key)
        else:
            raise obj.error(key, "unknown REST route")
        answer = obj.take(key)
        at = obj.at(key)
        if isinstance(answer, list):
            out[route] = [_reply(a, f"{at}[{i}]", source) for i, a in enumerate(answer)]
        else:
            out[route] = _reply(answer, at, source)
    obj.done()
    return out


def _stream_then(value: Any, where: str, source: str) -> Any:
    if value is None:
        return "stay_open"
    if value == "end":
        return "end"
    obj = _Obj(value, where, source)
    thrown = obj.obj("throw")
    if thrown.take("name", "CoderAgentError") != "CoderAgentError":
        raise thrown.error("name", "a scripted stream can only fail with a CoderAgentError")
    message = thrown.take("message", "")
    thrown.done()
    obj.done()
    return {"fail": message}


_TRANSPORTS = {"real-reader": "websocket", "scripted-client": "scripted"}


def _session_given(case: _Obj) -> tuple[dict[str, Any], dict[str, Any]]:
    """The inputs of a turn case, or of a model-level promotion case, in one shape. Returns
    the inputs and expectations the inputs imply (the stream's ``after_id``)."""
    src = case.source
    given = case.obj("input")
    implied: dict[str, Any] = {}
    level = given.take("level", None)
    if level not in (None, "model"):
        raise given.error("level", f"not a session-level case: {level!r}")
    config, tool_outputs = _config(given.take("config", {}), given.at("config"), src)
    chat_id = config.get("chat_id") or STUB_CHAT_ID
    out: dict[str, Any] = {}
    if level == "model":
        out["level"] = "session"
        out["transport"] = "websocket"
    else:
        transport = given.take("transport", "real-reader")
        if transport not in _TRANSPORTS:
            raise given.error("transport", f"unknown transport {transport!r}")
        out["transport"] = _TRANSPORTS[transport]
    out["config"] = config
    if tool_outputs:
        out["tool_outputs"] = tool_outputs
    if "rest" in given:
        out["rest"] = _rest(given.take("rest"), given.at("rest"), src, chat_id)
    if level == "model":
        out["calls"] = _calls([given.take("call")], given.at("call"), src)
        stream = given.obj("stream")
        implied["stream_after_ids"] = [stream.take("afterId")]
        then = stream.take("then", "idle")
        if then not in ("idle", "idle-until-abort"):
            raise stream.error("then", f"unknown stream ending {then!r}")
        # The stream stays open after its events: only the call's own deadline (or the
        # run's end) can end it.
        out["timeline"] = [
            {"socket": 0, "frame": stream.take("events")},
            {"until_done": 60.0},
        ]
        stream.done()
    else:
        out["calls"] = _calls(given.take("calls"), given.at("calls"), src)
        if "timeline" in given:
            out["timeline"] = _timeline(given.take("timeline"), given.at("timeline"), src)
        if "streamBatches" in given:
            out["stream_batches"] = given.take("streamBatches")
        if "streamThen" in given:
            out["stream_then"] = _stream_then(given.take("streamThen"), given.at("streamThen"), src)
    given.done()
    return out, implied


# Expected keys of a session case: the reference format's closed list, each mapped to ours.

#: Keys describing how one call ended, with the value converter.
_OUTCOME_SAME = {
    "text": "text",
    "textContains": "text_contains",
    "stepCount": "step_count",
    "toolCallCount": "tool_call_count",
    "providerMetadata": "provider_metadata",
    "chatId": "chat_id",
    "streamEndsCleanly": "ends_cleanly",
    "partsContainError": "emits_error_part",
    "lastKnownChatId": "last_known_chat_id",
    "chatIdAfter": "chat_id_after",
    "anchoredTurnCursor": "anchored_turn_cursor",
    "lastSeenMessageIdAfter": "last_seen_message_id_after",
    "socket0ClosedAfter": "first_socket_closed",
}
#: Keys describing the traffic of the whole run.
_TRAFFIC_SAME = {
    "createChatRequests": "create_chat_requests",
    "toolResultsPosts": "tool_results_posts",
    "toolExecutions": "tool_inputs",
    "interruptRequests": "interrupt_requests",
    "interrupted": "interrupted_chats",
    "sockets": "dials",
    "dials": "dials",
    "wsDials": "ws_dial_events",
    "wsCloses": "ws_close_events",
    "wsCloseEvents": "ws_close_events",
    "socket0Closed": "first_socket_closed_at_end",
    "socket0ClosedAtEnd": "first_socket_closed_at_end",
    "socket0ClosedByClient": "first_socket_closed_by_client",
    "getMessagesCalls": "get_messages_calls",
    "deletedQueueEntries": "deleted_queue_entries",
}


def _sources(value: Any, where: str, source: str) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in _part(p, f"{where}[{i}]", source).items() if k != "type"}
        for i, p in enumerate(value)
    ]


def _segment_events(value: Any, where: str, source: str) -> list[dict[str, Any]]:
    out = []
    for i, raw in enumerate(value):
        event = _Obj(raw, f"{where}[{i}]", source)
        out.append(_segment_event(event, source, with_type=True))
    return out


def _segment_event(event: _Obj, source: str, *, with_type: bool) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if with_type:
        out["type"] = event.take("type")
    for ts, ours in (
        ("segment", "segment"),
        ("status", "status"),
        ("finishReason", "finish_reason"),
    ):
        if ts in event:
            out[ours] = event.take(ts)
    if "error" in event:
        err = event.take("error")
        if err is None:
            out["error"] = None
        else:
            e = _Obj(err, event.at("error"), source)
            out["error"] = {}
            if "name" in e:
                out["error"]["name"] = _error_name(e.take("name"))
            if "messageMatches" in e:
                out["error"]["message_matches"] = e.take("messageMatches")
            e.done()
    event.done()
    return out


def _client_op(value: Any, where: str, source: str) -> str:
    """``getMessages(chat-1, limit=1)`` -> ``get_messages(chat-1, limit=1)``; a stream dial
    ``streamEvents(chat-1, afterId=40)`` -> ``stream_events(chat-1, after_id=40)``."""
    match = re.match(r"^([A-Za-z]+)\((.*)\)$", str(value))
    if match is None:
        raise ConversionError(source, where, f"not an operation label: {value!r}")
    name = re.sub(r"(?<!^)([A-Z])", r"_\1", match.group(1)).lower()
    args = match.group(2).replace("afterId=", "after_id=")
    return f"{name}({args})"


def _outcome(obj: _Obj, key: str, call_ids: set[str]) -> dict[str, Any] | None:
    """Our key and value for an outcome key of the reference, or None if ``key`` is not one."""
    src = obj.source
    at = obj.at(key)
    if key in _OUTCOME_SAME:
        return {_OUTCOME_SAME[key]: obj.take(key)}
    if key == "toolCalls":
        value = obj.take(key)
        return {
            "tool_calls": [_tool_call_subset(c, f"{at}[{i}]", src) for i, c in enumerate(value)]
        }
    if key == "finishReason":
        return _finish_reason(obj.take(key), at, src)
    if key == "usage":
        return {"usage": _usage(obj.take(key), at, src)}
    if key == "contentText":
        texts = []
        for i, raw in enumerate(obj.take(key)):
            part = _Obj(raw, f"{at}[{i}]", src)
            if part.take("type") != "text":
                raise part.error("type", "expected a text part")
            texts.append(part.take("text"))
            part.done()
        return {"content_text": texts}
    if key == "contentSources":
        return {"content_sources": _sources(obj.take(key), at, src)}
    if key == "streamedSources":
        return {"streamed_sources": _sources(obj.take(key), at, src)}
    if key == "lastPart":
        return {"last_part": _part(obj.take(key), at, src, subset=True)}
    if key == "parts":
        return {"parts": _parts(obj.take(key), at, src)}
    if key == "partsBeforeError":
        return {"parts_before_error": _parts(obj.take(key), at, src)}
    if key == "error":
        return {"error": _error(obj.take(key), at, src)}
    if key == "deadEnd":
        return {"dead_end": _error(obj.take(key), at, src)}
    if key in ("failed", "rejects") and key not in call_ids:
        return {"raised": obj.take(key)}
    if key == "isAPICallError":  # the reference's API-call error is our CoderStreamError
        return {"error": {"isinstance": {"CoderStreamError": obj.take(key)}}}
    if key == "isCoderChatError":
        return {"error": {"isinstance": {"CoderChatError": obj.take(key)}}}
    if key == "segmentSettle":
        value = obj.take(key)
        return {"segment_settle": _segment_event(_Obj(value, at, src), src, with_type=False)}
    return None


def _traffic(obj: _Obj, key: str) -> dict[str, Any] | None:
    src = obj.source
    at = obj.at(key)
    if key in _TRAFFIC_SAME:
        return {_TRAFFIC_SAME[key]: obj.take(key)}
    if key in ("requests", "requestsAtCheckpoint"):
        counts: dict[str, Any] = {}
        out: dict[str, Any] = {}
        for route, count in obj.take(key).items():
            if route == "interrupt":
                out["interrupt_requests"] = count
            else:
                counts[_path(route)] = count
        out["requests"] = counts
        return {"at_checkpoint": out} if key == "requestsAtCheckpoint" else out
    if key == "atCheckpoint":
        inner = _Obj(obj.take(key), at, src)
        out = {}
        for sub in list(inner.value):
            mapped = _traffic(inner, sub)
            if mapped is None:
                raise inner.error(sub, "unknown key (no mapping to this library's format)")
            _merge(out, mapped, inner, sub)
        inner.done()
        return {"at_checkpoint": out}
    if key == "createChatRequest":
        body = dict(obj.take(key))
        if "unsafe_dynamic_tools_names" in body:  # the names of the request's dynamic tools
            names = body.pop("unsafe_dynamic_tools_names")
            body["unsafe_dynamic_tools"] = [{"name": n} for n in names]
        return {"create_chat_body": body}
    if key == "submittedToolResults":
        return {"tool_results_bodies": obj.take(key)}
    if key == "segments":
        return {"segment_events": _segment_events(obj.take(key), at, src)}
    if key == "socketUrls":
        paths = []
        for url in obj.take(key):
            match = re.match(r"^wss?://[^/]*(/.*)$", str(url))
            if match is None:
                raise obj.error(key, f"not a WebSocket URL: {url!r}")
            paths.append(_path(match.group(1)))
        return {"socket_paths": paths}
    if key == "redialBackoffsMs":
        return {"redial_backoffs": [_seconds(ms, obj, key) for ms in obj.take(key)]}
    if key == "wsErrorEvents":
        events = []
        for i, raw in enumerate(obj.take(key)):
            event = _Obj(raw, f"{at}[{i}]", src)
            events.append({"attempt": event.take("attempt"), "message": event.take("message")})
            event.done()
        return {"ws_error_events": events}
    if key == "clientOps":
        return {
            "client_ops": [_client_op(op, f"{at}[{i}]", src) for i, op in enumerate(obj.take(key))]
        }
    return None


def _merge(out: dict[str, Any], mapped: dict[str, Any], obj: _Obj, key: str) -> None:
    for ours, value in mapped.items():
        if ours not in out:
            out[ours] = value
        elif isinstance(out[ours], dict) and isinstance(value, dict):
            for sub, sub_value in value.items():
                if isinstance(out[ours].get(sub), dict) and isinstance(sub_value, dict):
                    out[ours][sub] = {**out[ours][sub], **sub_value}
                elif sub in out[ours] and out[ours][sub] != sub_value:
                    raise obj.error(key, f"contradicts another expectation of {ours}.{sub}")
                else:
                    out[ours][sub] = sub_value
        elif out[ours] != value:
            raise obj.error(key, f"contradicts another expectation of {ours}")


def _session_expected(obj: _Obj, call_ids: set[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    calls: dict[str, Any] = {}
    for key in list(obj.value):
        if key in call_ids or re.fullmatch(r"s\d+", key):
            if key not in call_ids:
                raise obj.error(key, "names no call of the case")
            inner = obj.obj(key)
            mapped_call: dict[str, Any] = {}
            for sub in list(inner.value):
                mapped = _outcome(inner, sub, set())
                if mapped is None:
                    raise inner.error(sub, "unknown key (no mapping to this library's format)")
                _merge(mapped_call, mapped, inner, sub)
            inner.done()
            calls[key] = mapped_call
            continue
        mapped = _outcome(obj, key, call_ids)
        if mapped is None:
            mapped = _traffic(obj, key)
        if mapped is None:
            if key in ("perEvent", "finish"):
                raise obj.error(key, "applies to translator-level cases only")
            if key in ("retry", "failed"):
                raise obj.error(key, "names no call of the case")
            raise obj.error(key, "unknown key (no mapping to this library's format)")
        _merge(out, mapped, obj, key)
    obj.done()
    if calls:
        out["calls"] = calls
    return out


def _session(case: _Obj) -> tuple[dict[str, Any], dict[str, Any]]:
    given, implied = _session_given(case)
    call_ids = {c["id"] for c in given["calls"] if "id" in c}
    expected = _session_expected(case.obj("expected"), call_ids)
    for key, value in implied.items():
        expected.setdefault(key, value)
    return given, expected


# -- promotion -----------------------------------------------------------------------------------


def _promotion(case: _Obj) -> tuple[dict[str, Any], dict[str, Any]]:
    level = case.value.get("input", {}).get("level")
    if level == "model":
        return _session(case)
    if level != "translator":
        raise ConversionError(case.source, "input.level", f"unknown promotion level {level!r}")
    src = case.source
    given = case.obj("input")
    given.take("level")
    out_given = {
        "level": "translator",
        "procedure": _procedure(given),
        "translator": _translator_options(given.take("options"), given.at("options"), src),
        "events": _translator_events(given.take("events"), given.at("events"), src),
    }
    given.done()
    return out_given, _trace_expectations(case.obj("expected"), src, {})


# -- cases ---------------------------------------------------------------------------------------

_FAMILY_CONVERTERS: dict[str, Callable[[_Obj], tuple[dict[str, Any], dict[str, Any]]]] = {
    "translate": _translate,
    "dedup": _dedup,
    "usage": _usage_case,
    "history": _history,
    "prefix": _prefix,
    "promotion": _promotion,
    "turn": _session,
}
#: Keys of a reference case that describe where it came from; our cases carry their own
#: ``about`` line instead.
_PROVENANCE_KEYS = ("id", "source", "provenance", "asserted", "notes")


def convert_case(raw: Any, *, source: str) -> dict[str, Any]:
    """One reference case as ours: ``{"family", "name", "given", "expect"}`` (``name`` is the
    case id without its family prefix). ``source`` names the file in errors."""
    case = _Obj(raw, "case", source)
    family = case.take("kind")
    if family not in _FAMILY_CONVERTERS:
        raise case.error("kind", f"unknown case family {family!r}")
    case_id = case.take("id", None) or pathlib.Path(source).stem
    prefix = f"{family}-"
    if not case_id.startswith(prefix):
        raise case.error("id", f"{case_id!r} does not start with {prefix!r}")
    for key in _PROVENANCE_KEYS:
        case.take(key, None)
    given, expect = _FAMILY_CONVERTERS[family](case)
    case.done()
    return {"family": family, "name": case_id[len(prefix) :], "given": given, "expect": expect}


def convert_file(path: pathlib.Path) -> dict[str, Any]:
    """A reference case file as our case; ``ConversionError`` names the file and key."""
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ConversionError(str(path), "case", f"not readable as JSON ({exc})") from exc
    return convert_case(raw, source=str(path))


# -- writing our cases ---------------------------------------------------------------------------


def dump_case(value: Any, *, width: int = 100) -> str:
    """JSON that keeps short objects on one line (a wire event reads as one line)."""

    def render(item: Any, indent: int, used: int) -> str:
        flat = json.dumps(item, ensure_ascii=False)
        if not isinstance(item, dict | list) or not item or indent + used + len(flat) <= width:
            return flat
        pad = " " * (indent + 2)
        if isinstance(item, dict):
            lines = []
            for key, sub in item.items():
                head = json.dumps(key, ensure_ascii=False) + ": "
                lines.append(pad + head + render(sub, indent + 2, len(head)))
            return "{\n" + ",\n".join(lines) + "\n" + " " * indent + "}"
        lines = [pad + render(sub, indent + 2, 0) for sub in item]
        return "[\n" + ",\n".join(lines) + "\n" + " " * indent + "]"

    return render(value, 0, 0) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tests.conformance.convert",
        description="Rewrite our conformance cases from a reference-format corpus.",
    )
    parser.add_argument("source", type=pathlib.Path, help="directory of <family>-*.json cases")
    parser.add_argument(
        "--out",
        type=pathlib.Path,
        default=pathlib.Path(__file__).resolve().parent / "cases",
        help="where our cases go (default: cases/ beside this module)",
    )
    args = parser.parse_args(argv)
    written = 0
    for family in FAMILIES:
        for path in sorted(args.source.glob(f"{family}-*.json")):
            try:
                case = convert_file(path)
            except ConversionError as exc:
                print(f"convert: {exc}", file=sys.stderr)
                return 1
            target = args.out / family / f"{case['name']}.json"
            about = None
            if target.is_file():
                about = json.loads(target.read_text(encoding="utf-8")).get("about")
            target.parent.mkdir(parents=True, exist_ok=True)
            document = {"about": about, "given": case["given"], "expect": case["expect"]}
            target.write_text(dump_case(document), encoding="utf-8")
            written += 1
    print(f"convert: wrote {written} cases under {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
