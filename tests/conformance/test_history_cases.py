"""Conformance: every ``history-*.json`` case (FORMAT.md 4.4) against ``to_ui_messages``.

The case's wire messages are parsed with the wire model; our UI parts are mapped to the AI SDK
shapes of the case here, field by field (not through ``to_json``), and compared exactly
(``null`` in a case means absent, FORMAT.md 3).
"""

from __future__ import annotations

import pathlib
from typing import Any

import pytest

from coder_proto import (
    UIDynamicToolPart,
    UIFilePart,
    UIMessage,
    UIReasoningPart,
    UISourceUrlPart,
    UITextPart,
)
from coder_proto._agent.history import UIPart, to_ui_messages
from coder_proto._wire import ChatMessage, FilePart
from tests.conformance.cases import cases, load


def shape_part(part: UIPart) -> dict[str, Any]:
    if isinstance(part, UITextPart):
        return {"type": "text", "text": part.text, "state": part.state}
    if isinstance(part, UIReasoningPart):
        return {"type": "reasoning", "text": part.text, "state": part.state}
    if isinstance(part, UIDynamicToolPart):
        out: dict[str, Any] = {
            "type": "dynamic-tool",
            "toolName": part.tool_name,
            "toolCallId": part.tool_call_id,
            "state": part.state,
            "input": part.input,
        }
        if part.provider_executed is not None:
            out["providerExecuted"] = part.provider_executed
        if part.state == "output-available":
            out["output"] = part.output
        if part.state == "output-error":
            out["errorText"] = part.error_text
        return out
    if isinstance(part, UISourceUrlPart):
        out = {"type": "source-url", "sourceId": part.source_id, "url": part.url}
        if part.title is not None:
            out["title"] = part.title
        return out
    assert isinstance(part, UIFilePart)
    out = {"type": "file", "mediaType": part.media_type, "url": part.url}
    if part.filename is not None:
        out["filename"] = part.filename
    return out


def shape(message: UIMessage) -> dict[str, Any]:
    return {"id": message.id, "role": message.role, "parts": [shape_part(p) for p in message.parts]}


def drop_nulls(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: drop_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [drop_nulls(v) for v in value]
    return value


@pytest.mark.parametrize("path", cases("history"))
def test_history_case(path: pathlib.Path) -> None:
    case = load(path)
    messages = [ChatMessage.from_json(m) for m in case["input"]["messages"]]
    options = case["input"]["options"] or {}
    template = options.get("fileUrlTemplate")

    def resolver(part: FilePart) -> str | None:
        assert template is not None
        return template.replace("{file_id}", part.file_id or "")

    ui = to_ui_messages(messages, file_url=resolver if template else None)
    actual = drop_nulls([shape(m) for m in ui])
    assert actual == drop_nulls(case["expected"]["uiMessages"])
    # The JSON form users hand to a JavaScript front end is the same shape.
    assert drop_nulls([m.to_json() for m in ui]) == actual
