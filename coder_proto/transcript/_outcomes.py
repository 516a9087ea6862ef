"""A turn's outcome as JSON: what the recorder writes in ``turn_end`` and what a replay
computes to compare with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from .._errors import CoderAgentError, CoderApiError, CoderChatError, CoderStreamError
from .._outputs import ToolCall, ToolResult, Usage
from ._encoding import call_to_json, jsonable

__all__ = ["outcome_summary"]


def _error_summary(error: BaseException) -> dict[str, Any]:
    out: dict[str, Any] = {"type": type(error).__name__, "message": str(error)}
    if isinstance(error, CoderAgentError):
        out["retryable"] = bool(error.retryable)
    if isinstance(error, CoderChatError | CoderApiError):
        out["kind"] = error.kind
    if isinstance(error, CoderApiError):
        out["status"] = error.status
    if isinstance(error, CoderStreamError):
        out["reason"] = error.reason
    return out


def _usage_summary(usage: Any) -> dict[str, Any] | None:
    if not isinstance(usage, Usage):
        return None
    out = usage.to_dict()
    out.pop("raw", None)
    return out


def outcome_summary(outcome: object) -> dict[str, Any]:
    """A turn's outcome (a ``TurnResult`` or the error it raised) as JSON: text, reasoning,
    tool calls and results, usage, finish reason, error, chat id and cursor. The recorder
    writes it in ``turn_end``; a replay computes the same summary to compare."""
    if isinstance(outcome, BaseException):
        return {"error": _error_summary(outcome)}
    text = getattr(outcome, "text", None)
    if not isinstance(text, str):
        return {"error": {"type": type(outcome).__name__, "message": "not a turn result"}}
    calls: Sequence[ToolCall] = tuple(getattr(outcome, "tool_calls", ()))
    results: Sequence[ToolResult] = tuple(getattr(outcome, "tool_results", ()))
    steps = tuple(getattr(outcome, "steps", ()))
    error = getattr(outcome, "error", None)
    return {
        "text": text,
        "reasoning": getattr(outcome, "reasoning", ""),
        "finish_reason": getattr(outcome, "finish_reason", None),
        "usage": _usage_summary(getattr(outcome, "usage", None)),
        "steps": len(steps),
        "tool_calls": [call_to_json(c) for c in calls],
        "step_tool_calls": [[call_to_json(c) for c in s.tool_calls] for s in steps],
        "tool_results": [
            {
                "tool_call_id": r.tool_call_id,
                "tool_name": r.tool_name,
                "result": jsonable(r.result),
                "is_error": r.is_error,
            }
            for r in results
        ],
        "settled_by": getattr(outcome, "settled_by", None),
        "chat_id": getattr(outcome, "chat_id", None),
        "last_seen_message_id": getattr(outcome, "last_seen_message_id", None),
        "error": _error_summary(error) if isinstance(error, BaseException) else None,
    }
