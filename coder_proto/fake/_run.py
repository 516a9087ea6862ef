"""One scripted model run of the fake worker: scripts compiled into timed step operations.

A run plays a ``Script`` step by step (server-behaviour 3.4): each step is one model call
(a generation attempt), its parts stream into the episode buffer one operation at a time,
then the step commits. ``StepAccumulator`` builds the committed assistant message from the
streamed parts, exactly as the server's ``CommitStep`` persists what the model produced.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any, TypeAlias

import attrs

from .._json import js_stringify
from ._context import ScriptContext
from ._rows import Episode
from ._script import (
    CallClientTool,
    CallServerTool,
    Cite,
    Fail,
    Retry,
    Say,
    Script,
    ScriptItem,
    Think,
    Wait,
)
from ._template import Bindings

__all__ = [
    "Op",
    "PartOp",
    "RetryOp",
    "Run",
    "StepAccumulator",
    "UsageOp",
    "WaitOp",
    "chunks",
    "compile_step",
]

#: ``args_delta`` chunk size (characters of the JSON text).
ARGS_CHUNK = 16
_WORDS = re.compile(r"\S+\s*|\s+")


@attrs.frozen
class PartOp:
    """Stream one part. ``kind`` says how the commit keeps it: ``text``/``reasoning``
    deltas merge into one part, ``delta`` (``args_delta``) is stream-only, ``call`` is a
    complete tool call (``client`` for dynamic tools), ``inline_result`` stays in the
    assistant message, ``result`` becomes its own ``tool`` message, ``source`` is kept."""

    role: str
    part: dict[str, Any]
    kind: str
    client: bool = False


@attrs.frozen
class WaitOp:
    seconds: float


@attrs.frozen
class RetryOp:
    """A provider failure: retry ``times`` (a new generation attempt each), then go on, or
    fail the turn when ``fail`` is set."""

    index: int
    times: int
    retry: Retry | None = None
    fail: Fail | None = None


@attrs.frozen
class UsageOp:
    usage: dict[str, int]


Op: TypeAlias = PartOp | WaitOp | RetryOp | UsageOp


def chunks(text: str, size: int | None) -> list[str]:
    """Split ``text`` into deltas: ``size`` characters each, or words with their trailing
    whitespace when ``size`` is ``None``. Joining the chunks gives ``text`` back."""
    if not text:
        return []
    if size is not None:
        return [text[i : i + size] for i in range(0, len(text), size)]
    return _WORDS.findall(text)


def _tool_call_part(call_id: str, name: str, provider_executed: bool) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "tool-call", "tool_call_id": call_id, "tool_name": name}
    if provider_executed:
        part["provider_executed"] = True
    return part


def compile_step(
    items: list[ScriptItem],
    *,
    ctx: ScriptContext,
    tool_results: list[Any],
    new_call_id: Callable[[], str],
    first_index: int,
) -> list[Op]:
    """The operations of one step, its placeholders filled in from ``ctx`` and the latest
    ``tool_results``. Server tool results are published after all the step's calls, in call
    order (server-behaviour 3.5); provider-executed results follow their call inline.
    ``first_index`` numbers retry operations uniquely within the run."""
    bindings = Bindings.for_step(ctx, tool_results)
    ops: list[Op] = []
    local_results: list[PartOp] = []
    for n, item in enumerate(items):
        if isinstance(item, Say | Think):
            kind = "text" if isinstance(item, Say) else "reasoning"
            for chunk in chunks(bindings.text(item.text), item.chunk):
                ops.append(PartOp("assistant", {"type": kind, "text": chunk}, kind))
        elif isinstance(item, Cite):
            part: dict[str, Any] = {"type": "source", "url": item.url}
            if item.source_id is not None:
                part["source_id"] = item.source_id
            if item.title is not None:
                part["title"] = item.title
            ops.append(PartOp("assistant", part, "source"))
        elif isinstance(item, CallServerTool | CallClientTool):
            provider = isinstance(item, CallServerTool) and item.provider_executed
            call_id = item.tool_call_id or new_call_id()
            tool = ctx.tool(item.name) if isinstance(item, CallClientTool) else None
            args = bindings.value(item.args, tool.get("input_schema") if tool else None)
            for chunk in chunks(js_stringify(args), ARGS_CHUNK):
                delta = _tool_call_part(call_id, item.name, provider)
                delta["args_delta"] = chunk
                ops.append(PartOp("assistant", delta, "delta"))
            full = _tool_call_part(call_id, item.name, provider)
            full["args"] = args
            ops.append(PartOp("assistant", full, "call", client=isinstance(item, CallClientTool)))
            if isinstance(item, CallServerTool):
                result: dict[str, Any] = {
                    "type": "tool-result",
                    "tool_call_id": call_id,
                    "tool_name": item.name,
                    "result": bindings.value(item.result),
                }
                if item.is_error:
                    result["is_error"] = True
                if provider:
                    result["provider_executed"] = True
                    ops.append(PartOp("tool", result, "inline_result"))
                else:
                    local_results.append(PartOp("tool", result, "result"))
        elif isinstance(item, Wait):
            ops.append(WaitOp(item.seconds))
        elif isinstance(item, Retry):
            ops.append(RetryOp(first_index + n, item.times, retry=item))
        elif isinstance(item, Fail):
            ops.append(RetryOp(first_index + n, item.retries, fail=item))
        else:
            ops.append(UsageOp(item.to_json()))
    ops.extend(local_results)
    return ops


@attrs.define
class StepAccumulator:
    """The content of the step in progress, as it will be committed.

    Consecutive text (or reasoning) deltas merge into one committed part. Their pieces are
    kept apart and joined when ``content`` is read, so a long block costs linear time (adding
    each delta to the part's string would copy the whole text every time)."""

    _content: list[dict[str, Any]] = attrs.Factory(list)
    results: list[dict[str, Any]] = attrs.Factory(list)
    client_calls: list[dict[str, Any]] = attrs.Factory(list)
    usage: dict[str, int] | None = None
    output_chars: int = 0
    reasoning_chars: int = 0
    _merging: str | None = None
    #: The text of the block being merged (the last part of ``content``), not yet joined.
    _pieces: list[str] = attrs.Factory(list)

    @property
    def content(self) -> list[dict[str, Any]]:
        """The committed parts so far, in order."""
        self._join()
        return self._content

    def _join(self) -> None:
        """Write the merging block's pieces into its part (leaving one joined piece)."""
        pieces = self._pieces
        if len(pieces) > 1:
            joined = "".join(pieces)
            self._pieces = [joined]
            self._content[-1]["text"] = joined

    def _end_block(self) -> None:
        self._join()
        self._pieces = []
        self._merging = None

    def add(self, op: PartOp, created_at: str) -> dict[str, Any]:
        """Record ``op`` and return the part to stream (``created_at`` stamped where the
        server stamps it)."""
        part = dict(op.part)
        if op.kind in ("text", "reasoning"):
            text = part["text"]
            self.output_chars += len(text)
            if op.kind == "reasoning":
                self.reasoning_chars += len(text)
            if self._merging == op.kind:
                self._pieces.append(text)
            else:
                self._end_block()
                committed = {"type": op.kind, "text": text}
                if op.kind == "reasoning":
                    committed["created_at"] = created_at
                self._content.append(committed)
                self._pieces = [text]
                self._merging = op.kind
            return part
        self._end_block()
        if op.kind == "delta":
            self.output_chars += len(part.get("args_delta", ""))
            return part
        if op.kind in ("call", "inline_result", "result"):
            part["created_at"] = created_at
        if op.kind == "result":
            self.results.append(part)
        else:
            self.content.append(part)
        if op.client:
            self.client_calls.append(part)
        return part

    def partial(self) -> list[dict[str, Any]]:
        """What an interruption commits: the text, reasoning and sources streamed so far
        (tool calls without their results are dropped, so no call is left dangling)."""
        return [dict(p) for p in self.content if p["type"] in ("text", "reasoning", "source")]

    def server_results(self) -> list[Any]:
        inline = [p["result"] for p in self.content if p["type"] == "tool-result"]
        return inline + [p["result"] for p in self.results]


@attrs.define
class Run:
    """A worker run of one turn on one chat."""

    script: Script
    ctx: ScriptContext
    steps: list[list[ScriptItem]]
    model_config_id: str
    next_at: float
    step_index: int = 0
    #: ``start`` (next: a generation attempt), ``ops`` (streaming), ``paused``
    #: (requires_action).
    phase: str = "start"
    ops: list[Op] | None = None
    op_index: int = 0
    acc: StepAccumulator = attrs.Factory(StepAccumulator)
    #: The part buffer of the current generation attempt.
    episode: Episode | None = None
    retries: dict[int, int] = attrs.Factory(dict)
    tool_results: list[Any] = attrs.Factory(list)

    @classmethod
    def create(cls, script: Script, ctx: ScriptContext, model_config_id: str, at: float) -> Run:
        return cls(script, ctx, script.steps(), model_config_id, at)

    def op_index_base(self) -> int:
        """A number unique to the current step, for retry bookkeeping across attempts."""
        return sum(len(step) for step in self.steps[: self.step_index])
