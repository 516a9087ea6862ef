"""Reading a step's attempts and result out of chat history (docs/durable-workflows.md: "Recover
the result before resubmitting", "Make client tools crash-safe").

* ``step_marker`` / ``marked_prompt``: the server stores the prompt verbatim, so a step-scoped
  marker embedded in it makes every attempt of the step findable;
* ``HistoryScan`` pages history newest-first (the endpoint's default order) until it has seen
  a user message without the marker (steps run sequentially, so a step's attempts sit
  contiguous at the tail) or the first message: it counts the attempts and says whether the
  newest user message is this step's ("never submitted" is never concluded from a truncated
  read);
* ``pending_client_calls``: the calls a ``requires_action`` pause waits for, derived exactly
  as the lost-``action_required`` recovery derives them (state machines G.5);
* ``recover_text`` / ``recover_structured``: what ``generate()`` would have returned, from
  the assistant messages after the step's user message.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Collection, Iterable
from typing import Any, Final

from .._agent.history import UIDynamicToolPart, UITextPart, to_ui_messages
from .._agent.segment import recover_pending_calls
from .._errors import CoderAgentError
from .._json import js_stringify
from .._outputs import ToolCall
from .._wire.chats import ChatMessagesResponse
from .._wire.events import ActionRequiredEvent
from .._wire.message_parts import TextPart
from .._wire.messages import ChatMessage
from ._records import check_key_part

__all__ = [
    "HistoryScan",
    "default_step",
    "marked_prompt",
    "pending_client_calls",
    "recover_structured",
    "recover_text",
    "step_marker",
]

_FORBIDDEN_IN_MARKER: Final = re.compile(r"[\[\]\s]")


def step_marker(workflow_id: str, step: str) -> str:
    """``[{workflow_id}/{step}]``: stable across the step's retries, distinct across steps.
    Neither part may contain brackets or whitespace (the marker must never be a substring of
    another step's marker); ``CoderAgentError`` otherwise."""
    for value, name in ((workflow_id, "workflow_id"), (step, "step")):
        check_key_part(value, name)
        if _FORBIDDEN_IN_MARKER.search(value):
            raise CoderAgentError(f"{name} must not contain brackets or whitespace: {value!r}")
    return f"[{workflow_id}/{step}]"


def default_step(prompt: str) -> str:
    """The step name used when the caller gives none: ``step-`` and 16 hex digits of the
    prompt's SHA-256. Retries of a step resend the same prompt, so they share it; two steps of
    one workflow with the same prompt must pass distinct names."""
    return "step-" + hashlib.sha256(prompt.encode("utf-8")).hexdigest()[:16]


def marked_prompt(marker: str, prompt: str) -> str:
    """The prompt as sent: the marker, a space, the prompt."""
    if type(prompt) is not str or not prompt.strip():
        raise CoderAgentError("a durable step's prompt must be a non-empty string")
    return f"{marker} {prompt}"


def _carries(message: ChatMessage, marker: str) -> bool:
    return any(type(p) is TextPart and marker in p.text for p in message.content)


class HistoryScan:
    """History read newest-first for one step's ``marker``. Feed pages with ``add``; while
    ``next_before_id`` is not ``None``, fetch the page before that id and feed it too.

    By default the scan stops at the first user message without the marker (the step's
    attempts are contiguous at the tail); with ``find=True`` it stops at the first user
    message carrying it (a past step, followed by later steps' messages)."""

    def __init__(self, marker: str, *, find: bool = False) -> None:
        self.marker = marker
        self.find = find
        self._messages: dict[int, ChatMessage] = {}
        self._more = True

    def __repr__(self) -> str:
        return f"HistoryScan({self.marker!r}, messages={len(self._messages)}, done={self.done})"

    def add(self, page: ChatMessagesResponse) -> None:
        """Take one page (any order). A page that adds nothing new ends the scan, so a server
        repeating itself cannot make it loop."""
        before = len(self._messages)
        for message in page.messages:
            self._messages.setdefault(message.id, message)
        self._more = page.has_more and len(self._messages) > before

    def _newest_first(self) -> list[ChatMessage]:
        return [self._messages[i] for i in sorted(self._messages, reverse=True)]

    @property
    def done(self) -> bool:
        """True once the stop message was seen (see the class docstring) or history has no
        more pages."""
        if not self._more:
            return True
        return any(
            m.role == "user" and _carries(m, self.marker) == self.find
            for m in self._messages.values()
        )

    @property
    def next_before_id(self) -> int | None:
        """The ``before_id`` of the next page to fetch, or ``None`` when done."""
        if self.done or not self._messages:
            return None
        return min(self._messages)

    @property
    def messages(self) -> tuple[ChatMessage, ...]:
        """Every message read, oldest first."""
        return tuple(self._messages[i] for i in sorted(self._messages))

    @property
    def attempts(self) -> int:
        """User messages carrying the marker, counted from the newest back to the first user
        message without it (``markerAttempts()``)."""
        count = 0
        for message in self._newest_first():
            if message.role != "user":
                continue
            if not _carries(message, self.marker):
                break
            count += 1
        return count

    @property
    def submitted(self) -> bool:
        """The newest user message carries the marker: the step's prompt is the chat's
        latest turn."""
        for message in self._newest_first():
            if message.role == "user":
                return _carries(message, self.marker)
        return False

    @property
    def newest_message_id(self) -> int | None:
        return max(self._messages) if self._messages else None

    def turn_messages(self) -> tuple[ChatMessage, ...]:
        """The newest user message and everything after it, oldest first (empty when no user
        message was read)."""
        ordered = self.messages
        for index in range(len(ordered) - 1, -1, -1):
            if ordered[index].role == "user":
                return ordered[index:]
        return ()

    def marked_turn(self) -> tuple[ChatMessage, ...]:
        """The newest user message carrying the marker and what followed it up to the next
        user message, oldest first (empty when none was read)."""
        ordered = self.messages
        for index in range(len(ordered) - 1, -1, -1):
            message = ordered[index]
            if message.role == "user" and _carries(message, self.marker):
                end = index + 1
                while end < len(ordered) and ordered[end].role != "user":
                    end += 1
                return ordered[index:end]
        return ()


def pending_client_calls(
    messages: Iterable[ChatMessage], client_tools: Collection[str]
) -> tuple[ToolCall, ...]:
    """The calls a ``requires_action`` pause waits for: the last assistant message's client
    calls (not provider-executed, named as a configured client tool) with no result in a later
    message (G.5). History does not record which calls were client tools, so a name outside
    ``client_tools`` is never taken for an unstarted client call. ``input`` is the args' JSON
    text (D18)."""
    events = recover_pending_calls(
        messages,
        turn_cursor=0,
        dynamic_tool_names=client_tools,
        submitted_tool_call_ids=frozenset(),
    )
    if not events:
        return ()
    last = events[-1]
    assert isinstance(last, ActionRequiredEvent)
    return tuple(
        ToolCall(tool_call_id=c.tool_call_id, tool_name=c.tool_name, input=c.args, dynamic=True)
        for c in last.tool_calls
    )


def _turn_parts(turn: Iterable[ChatMessage]) -> list[Any]:
    transcript = to_ui_messages(turn)
    parts: list[Any] = []
    for message in transcript:
        if message.role == "assistant":
            parts.extend(message.parts)
    return parts


def recover_text(turn: Iterable[ChatMessage], client_tools: Collection[str]) -> str:
    """What ``generate().text`` would have returned for a finished turn (``turn`` is its
    user message and what followed): the text of the assistant parts after the last configured
    client tool's part (only a client tool ends a step, so narration before a trailing server
    tool call is kept)."""
    parts = _turn_parts(turn)
    cut = 0
    for index, part in enumerate(parts):
        if isinstance(part, UIDynamicToolPart) and part.tool_name in client_tools:
            cut = index + 1
    return "".join(p.text for p in parts[cut:] if isinstance(p, UITextPart))


def recover_structured(
    turn: Iterable[ChatMessage], tool_name: str, parse: Callable[[ToolCall], Any]
) -> tuple[bool, Any]:
    """A structured-output step's answer: the newest ``tool_name`` filing of the turn that
    ``parse`` accepts (``parse`` raises a ``CoderAgentError`` on an invalid filing, exactly as
    the live path validates; a schema-invalid re-filing never shadows a valid answer).
    Returns ``(found, answer)``."""
    filed = [
        p
        for p in _turn_parts(turn)
        if isinstance(p, UIDynamicToolPart)
        and p.tool_name == tool_name
        and p.provider_executed is not True
    ]
    for part in reversed(filed):
        call = ToolCall(
            tool_call_id=part.tool_call_id,
            tool_name=part.tool_name,
            input=js_stringify(part.input if part.input is not None else {}),
            dynamic=True,
        )
        try:
            return True, parse(call)
        except CoderAgentError:
            continue
    return False, None
