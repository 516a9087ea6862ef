"""``FakeCoderModel``: the Coder chat server as a pure state machine (server-behaviour 2-8).

No I/O and no clock: every entry point takes ``now`` (monotonic seconds) and first advances
the simulated workers to it. The model answers HTTP requests (``handle_http``), WebSocket
upgrades (``handle_upgrade``, giving a subscription whose ``pull(now)`` yields ready frames),
and runs the workers in ``tick(now)``; ``next_deadline()`` says when the next tick is due.

Transitions follow server-behaviour 2.2 exactly; each is one "transaction" that bumps the
chat's ``snapshot_version`` (and ``history_version`` / ``queue_version`` when history or the
queue changes), which is all the stream needs to compute its level-triggered batches (3.3,
3.4). The scripted worker (``run.py``) streams parts into the current episode's buffer and
commits steps, enters ``requires_action``, retries, fails and finishes turns, promoting the
queue head without a terminal status in between (8.2).
"""

from __future__ import annotations

import logging
import random
import re
from collections.abc import Iterable, Mapping
from typing import Any, Final
from urllib.parse import unquote

from .._constants import (
    ALLOWED_MEDIA_TYPES,
    DEFAULT_CHAT_ERROR_MESSAGE,
    MAX_ATTACHMENT_BYTES,
    MAX_ATTACHMENTS_PER_CHAT,
    MAX_CREATE_BODY_BYTES,
    MAX_DYNAMIC_TOOLS,
    MAX_TITLE_LENGTH,
    MESSAGES_LIMIT_DEFAULT,
    MESSAGES_LIMIT_MAX,
    REASONING_EFFORTS,
    STATUS_ERROR,
    STATUS_INTERRUPTING,
    STATUS_REQUIRES_ACTION,
    STATUS_RUNNING,
    STATUS_WAITING,
)
from .._json import js_stringify, loads
from ._util import UUID_RE, new_uuid, rfc3339
from .config import FakeConfig, FakeCounters, Faults
from .http import (
    READ_ONLY_OPS,
    UPGRADE_OPS,
    FakeApiError,
    FakeHttpResponse,
    Query,
    RouteMatch,
    error_response,
    json_response,
    match_route,
    parse_json_object,
    parse_positive_int,
    parse_target,
    parse_uuid_param,
    request_token,
    token_matches,
)
from .run import PartOp, RetryOp, Run, StepAccumulator, UsageOp, WaitOp, compile_step
from .script import Fail, Retry, Script, ScriptContext
from .state import Episode, FakeChat, FakeFile, FakeMessage, FakeModelSpec, FakeQueuedMessage
from .stream import StreamSubscription, WatchSubscription

__all__ = [
    "CANCEL_BY_EDIT",
    "CANCEL_BY_PROMOTION",
    "CANCEL_BY_TIMEOUT",
    "CANCEL_BY_USER",
    "CANCEL_BY_USER_MESSAGE",
    "FakeCoderModel",
]

logger = logging.getLogger("coder_proto")

#: Synthetic cancellation reasons (server-behaviour 4.2).
CANCEL_BY_USER: Final = "Tool execution interrupted by user"
CANCEL_BY_USER_MESSAGE: Final = "Tool execution interrupted by user message"
CANCEL_BY_PROMOTION: Final = "Tool execution interrupted by queued message promotion"
CANCEL_BY_EDIT: Final = "Tool execution interrupted by message edit"
#: The requires_action deadline's reason; the server's exact text was not read (Q2).
CANCEL_BY_TIMEOUT: Final = "Tool execution timed out waiting for client tool results"

ACTIVE_STATUSES: Final = frozenset({STATUS_RUNNING, STATUS_INTERRUPTING, STATUS_REQUIRES_ACTION})
ARCHIVE_CONFLICT: Final = (
    "Cannot archive an active chat. Interrupt or wait for the chat to finish first."
)

_INPUT_PART_TYPES: Final = ("text", "file", "file-reference")
_ONE_PER_TURN_TOOLS: Final = 1


def _content_text(content: Iterable[Mapping[str, Any]]) -> str:
    return "\n".join(str(p.get("text", "")) for p in content if p.get("type") == "text")


class FakeCoderModel:
    """The fake server's state and behaviour (see the module docstring).

    ``config`` is the profile (``FakeConfig``), ``faults`` the injected failures
    (``Faults``), ``counters`` what was seen (``FakeCounters``). ``chats`` maps chat ids to
    their rows (``FakeChat``): read it in tests, change it through requests.
    """

    def __init__(self, config: FakeConfig | None = None, faults: Faults | None = None) -> None:
        self.config = config if config is not None else FakeConfig()
        self.faults = faults if faults is not None else Faults(seed=self.config.seed)
        self.counters = FakeCounters()
        self._rng = random.Random(self.config.seed)
        self.organization_id = self.config.organization_id or new_uuid(self._rng)
        self.user_id = new_uuid(self._rng)
        self.chats: dict[str, FakeChat] = {}
        self.files: dict[str, FakeFile] = {}
        self.runs: dict[str, Run] = {}
        self._message_id = 0
        self._queued_id = 0
        self._call_id = 0
        self._now = 0.0
        self._streams: list[StreamSubscription] = []
        self._watches: list[WatchSubscription] = []
        self._advanced: set[str] = set()
        self.provider_ids: dict[str, str] = {}
        self.model_config_ids: dict[str, str] = {}
        for spec in self.config.models:
            self.provider_ids.setdefault(spec.provider, new_uuid(self._rng))
            self.model_config_ids[spec.model] = new_uuid(self._rng)
        self._created_at = self.timestamp(0.0)

    # -- basics -----------------------------------------------------------------------------

    @property
    def token(self) -> str:
        """The session token requests must carry (never logged)."""
        return self.config.token

    def timestamp(self, now: float) -> str:
        """RFC 3339 wall-clock text for monotonic ``now``."""
        return rfc3339(now + self.config.wall_clock_offset)

    def chat(self, chat_id: str) -> FakeChat:
        """The chat row; ``KeyError`` when unknown."""
        return self.chats[chat_id]

    def _next_message_id(self) -> int:
        step = self._rng.randint(1, 3) if self.config.message_id_gaps else 1
        self._message_id += step
        return self._message_id

    def _next_queued_id(self) -> int:
        self._queued_id += 1
        return self._queued_id

    def _new_call_id(self) -> str:
        self._call_id += 1
        return f"call_{self._call_id:04d}_{self._rng.getrandbits(48):012x}"

    def _advance_clock(self, now: float) -> float:
        if now > self._now:
            self._now = now
        return self._now

    # -- model configs (wire 8) -------------------------------------------------------------

    def _spec_by_id(self, config_id: str) -> FakeModelSpec | None:
        for spec in self.config.models:
            if self.model_config_ids.get(spec.model) == config_id:
                return spec
        return None

    def _default_spec(self) -> FakeModelSpec | None:
        enabled = [s for s in self.config.models if s.enabled]
        for spec in enabled:
            if spec.is_default:
                return spec
        return enabled[0] if enabled else None

    def model_config_json(self, spec: FakeModelSpec) -> dict[str, Any]:
        """A ``ChatModel`` (no ``provider`` string: server-behaviour 1.4, 9.9)."""
        default = self._default_spec()
        return {
            "id": self.model_config_ids[spec.model],
            "organization_id": self.organization_id,
            "ai_provider_id": self.provider_ids[spec.provider],
            "model": spec.model,
            "display_name": spec.display_name,
            "enabled": spec.enabled,
            "is_default": default is not None and spec.model == default.model,
            "context_limit": spec.context_limit,
            "compression_threshold": spec.compression_threshold,
            "reasoning_efforts": list(spec.reasoning_efforts),
            "created_at": self._created_at,
            "updated_at": self._created_at,
        }

    def model_catalog_json(self) -> dict[str, Any]:
        """The organization model route's body (wire 8)."""
        providers = [
            {
                "id": provider_id,
                "type": provider,
                "display_name": provider.title(),
                "icon": "",
                "enabled": True,
                "available": True,
                "unavailable_reason": "",
                "has_api_key": True,
                "has_user_api_key": False,
                "has_effective_api_key": True,
                "allow_user_api_key": False,
            }
            for provider, provider_id in self.provider_ids.items()
        ]
        return {
            "models": [self.model_config_json(s) for s in self.config.models],
            "providers": providers,
            "unsupported_providers": [],
        }

    # -- serialisation ----------------------------------------------------------------------

    def message_json(self, message: FakeMessage) -> dict[str, Any]:
        return message.to_json(
            zero_value_keys=self.config.zero_value_keys, stamp=self.config.stamp_promotions
        )

    def queued_json(self, queued: FakeQueuedMessage) -> dict[str, Any]:
        return queued.to_json(zero_value_keys=self.config.zero_value_keys)

    def chat_json(self, chat: FakeChat, *, light: bool = False) -> dict[str, Any]:
        files = [self.files[f] for f in chat.file_ids if f in self.files]
        return chat.to_json(files=files, light=light)

    def _json(self, status: int, value: Any) -> FakeHttpResponse:
        return json_response(status, value, html_escape=self.config.html_escape)

    # -- transactions (server-behaviour 0) --------------------------------------------------

    def _begin(self, chat: FakeChat, t: float) -> None:
        chat.snapshot_version += 1
        chat.updated_at = self.timestamp(t)

    def _history_changed(self, chat: FakeChat) -> None:
        if chat.history_version != chat.snapshot_version:
            chat.history_version = chat.snapshot_version
            self._close_episode(chat)
            chat.generation_attempt = 0

    def _queue_changed(self, chat: FakeChat) -> None:
        chat.queue_version = chat.snapshot_version

    def _close_episode(self, chat: FakeChat) -> None:
        episode = chat.episodes.get((chat.history_version, chat.generation_attempt))
        if episode is not None:
            episode.closed = True
        # Closed episodes stay relayable for sockets still draining them; keep a few.
        while len(chat.episodes) > 4:
            del chat.episodes[next(iter(chat.episodes))]

    def _insert(
        self,
        chat: FakeChat,
        t: float,
        role: str,
        content: list[dict[str, Any]],
        **fields: Any,
    ) -> FakeMessage:
        self._history_changed(chat)
        message = FakeMessage(
            id=self._next_message_id(),
            chat_id=chat.id,
            role=role,
            content=content,
            created_at=self.timestamp(t),
            changed_at=chat.history_version,
            **fields,
        )
        chat.messages.append(message)
        return message

    def _publish(
        self, kind: str, chat: FakeChat, tool_calls: list[dict[str, Any]] | None = None
    ) -> None:
        """A watch event to every watcher (server-behaviour 6; best effort, no replay)."""
        if not self._watches:
            return
        event: dict[str, Any] = {"kind": kind, "chat": self.chat_json(chat, light=True)}
        if tool_calls is not None:
            event["tool_calls"] = tool_calls
        for watch in self._watches:
            watch.push(event)

    def _action_calls(self, chat: FakeChat) -> list[dict[str, str]]:
        """Pending calls as ``action_required`` lists them: ``args`` as JSON text."""
        return [
            {
                "tool_call_id": str(c.get("tool_call_id", "")),
                "tool_name": str(c.get("tool_name", "")),
                "args": js_stringify(c.get("args", {})),
            }
            for c in chat.pending_tool_calls()
        ]

    def _cancel_pending(self, chat: FakeChat, t: float, reason: str) -> list[FakeMessage]:
        """Close every outstanding tool call with a synthetic cancellation result (rule of
        server-behaviour 2.2: before any user message, and on interrupt/deadline)."""
        out = []
        for call in chat.pending_tool_calls():
            out.append(
                self._insert(
                    chat,
                    t,
                    "tool",
                    [
                        {
                            "type": "tool-result",
                            "tool_call_id": call.get("tool_call_id", ""),
                            "tool_name": call.get("tool_name", ""),
                            "result": reason,
                            "is_error": True,
                            "created_at": self.timestamp(t),
                        }
                    ],
                )
            )
        chat.requires_action_deadline = None
        return out

    def _promote_head(self, chat: FakeChat, t: float) -> FakeMessage:
        """Move the queue head into history as a brand-new user message (server-behaviour
        2.5), stamped with its queued id (D8; omitted on the wire when
        ``stamp_promotions`` is off)."""
        head = chat.queue.pop(0)
        self._queue_changed(chat)
        return self._insert(
            chat,
            t,
            "user",
            [dict(p) for p in head.content],
            created_by=head.created_by,
            model_config_id=head.model_config_id,
            queued_message_id=head.id,
        )

    # -- runs ---------------------------------------------------------------------------------

    def _start_run(self, chat: FakeChat, prompt: FakeMessage, t: float) -> None:
        self._stop_run(chat)
        chat.turns += 1
        ctx = ScriptContext(
            chat_id=chat.id,
            prompt=_content_text(prompt.content),
            tools=tuple(dict(tool) for tool in chat.dynamic_tools),
            turn=chat.turns,
        )
        script = self.config.scripts.select(ctx)
        stall = self.faults.claim_run_stall(chat.id)
        run = Run.create(
            script,
            ctx,
            prompt.model_config_id or chat.last_model_config_id,
            t + self.config.run_start_delay + stall,
        )
        self.runs[chat.id] = run
        chat.worker_active = True
        chat.queued_for_capacity = stall > 0

    def _stop_run(self, chat: FakeChat) -> None:
        self.runs.pop(chat.id, None)
        chat.worker_active = False
        chat.queued_for_capacity = False
        chat.retry_state = None
        self._close_episode(chat)

    def _resume_run(self, chat: FakeChat, t: float, results: list[Any]) -> None:
        run = self.runs.get(chat.id)
        if run is None:
            # No worker owns the chat (only reachable through hand-built states); a
            # fresh closing run lets the model "answer" the results.
            run = Run.create(
                Script(()), ScriptContext(chat_id=chat.id, prompt=""), chat.last_model_config_id, t
            )
            self.runs[chat.id] = run
            chat.worker_active = True
        run.phase = "start"
        run.ops = None
        run.tool_results = list(results)
        run.next_at = t + self._delay(run)

    def _delay(self, run: Run) -> float:
        return (
            run.script.chunk_delay
            if run.script.chunk_delay is not None
            else self.config.chunk_delay
        )

    def _usage(
        self, chat: FakeChat, acc: StepAccumulator, spec: FakeModelSpec | None
    ) -> dict[str, int]:
        if acc.usage is not None:
            return dict(acc.usage)
        history_chars = sum(
            len(str(p.get("text", ""))) for m in chat.visible_messages() for p in m.content
        )
        cached = (history_chars // 4) // 2
        input_tokens = 20 + history_chars // 4 - cached
        output_tokens = max(1, acc.output_chars // 4)
        usage = {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "total_tokens": input_tokens + output_tokens,
            "cache_creation_tokens": 0,
            "cache_read_tokens": cached,
        }
        if acc.reasoning_chars:
            usage["reasoning_tokens"] = max(1, acc.reasoning_chars // 4)
        usage["context_limit"] = spec.context_limit if spec is not None else 200_000
        return usage

    def _publish_part(self, episode: Episode, role: str, part: dict[str, Any]) -> None:
        size = len(str(part))
        if episode.size + size > self.config.part_buffer_bytes:
            # Server-behaviour 3.3: the buffer keeps at most ~1 MB per episode.
            return
        episode.size += size
        episode.parts.append((role, part))

    def _run_one(self, chat: FakeChat, run: Run, t: float) -> None:
        """Execute the run's next operation, scheduled at ``t``."""
        if run.phase == "start":
            # RecordGenerationAttempt (server-behaviour 3.4 step 1).
            self._begin(chat, t)
            self._close_episode(chat)
            chat.generation_attempt += 1
            chat.retry_state = None
            chat.queued_for_capacity = False
            key = (chat.history_version, chat.generation_attempt)
            run.episode = Episode(history_version=key[0], generation_attempt=key[1])
            chat.episodes[key] = run.episode
            if run.ops is None:
                run.ops = compile_step(
                    run.steps[run.step_index] if run.step_index < len(run.steps) else [],
                    prompt=run.ctx.prompt,
                    tool_results=run.tool_results,
                    new_call_id=self._new_call_id,
                    first_index=run.op_index_base(),
                )
            run.op_index = 0
            run.acc = StepAccumulator()
            run.phase = "ops"
            run.next_at = t + self._delay(run)
            return
        ops = run.ops or []
        if run.op_index >= len(ops):
            self._commit_step(chat, run, t)
            return
        op = ops[run.op_index]
        run.op_index += 1
        if isinstance(op, PartOp):
            assert run.episode is not None
            self._publish_part(run.episode, op.role, run.acc.add(op, self.timestamp(t)))
            run.next_at = t + self._delay(run)
        elif isinstance(op, WaitOp):
            run.next_at = t + op.seconds
        elif isinstance(op, UsageOp):
            run.acc.usage = op.usage
            run.next_at = t
        else:
            self._retry_or_fail(chat, run, op, t)

    def _retry_or_fail(self, chat: FakeChat, run: Run, op: RetryOp, t: float) -> None:
        done = run.retries.get(op.index, 0)
        if done < op.times:
            run.retries[op.index] = done + 1
            delay = min(self.config.retry_base_delay * 2**done, self.config.retry_max_delay)
            info: Retry | Fail
            if op.retry is not None:
                info, error = op.retry, op.retry.error
            else:
                assert op.fail is not None
                info, error = op.fail, op.fail.message
            state: dict[str, Any] = {
                "attempt": done + 1,
                "delay_ms": round(delay * 1000),
                "error": error,
                "kind": info.kind,
            }
            if info.provider is not None:
                state["provider"] = info.provider
            if info.status_code is not None:
                state["status_code"] = info.status_code
            state["retrying_at"] = self.timestamp(t + delay)
            self._begin(chat, t)
            chat.retry_state = state
            chat.retry_state_version = chat.snapshot_version
            run.phase = "start"
            run.next_at = t + delay
            return
        if op.fail is not None:
            self._finish_error(chat, t, op.fail)
            return
        run.next_at = t

    def _commit_step(self, chat: FakeChat, run: Run, t: float) -> None:
        """CommitStep, then the next worker decision (server-behaviour 2.2, 3.4)."""
        acc = run.acc
        self._begin(chat, t)
        if acc.content:
            self._insert(
                chat,
                t,
                "assistant",
                acc.content,
                model_config_id=run.model_config_id,
                usage=self._usage(chat, acc, self._spec_by_id(run.model_config_id)),
            )
        for result in acc.results:
            self._insert(chat, t, "tool", [result])
        server_results = acc.server_results()
        if server_results:
            run.tool_results = server_results
        run.step_index += 1
        run.ops = None
        if acc.client_calls:
            # EnterRequiresAction: its own transaction (Q9).
            self._begin(chat, t)
            self._close_episode(chat)
            chat.status = STATUS_REQUIRES_ACTION
            chat.requires_action_deadline = t + self.config.requires_action_timeout
            run.phase = "paused"
            self._publish("action_required", chat, self._action_calls(chat))
        elif run.step_index < len(run.steps):
            run.phase = "start"
            run.next_at = t + self._delay(run)
        else:
            self._finish_turn(chat, t)

    def _finish_turn(self, chat: FakeChat, t: float) -> None:
        """FinishTurn: R0 → W; R1 → the queue head is promoted and the status stays
        ``running`` with no terminal status in between (server-behaviour 8.2)."""
        self._stop_run(chat)
        self._begin(chat, t)
        if chat.queue:
            self._start_run(chat, self._promote_head(chat, t), t)
            chat.status = STATUS_RUNNING
        else:
            chat.status = STATUS_WAITING
        self._publish("status_change", chat)

    def _finish_error(self, chat: FakeChat, t: float, fail: Fail) -> None:
        """FinishError: R0 → E0, R1 → E1, with ``last_error`` (server-behaviour 8.9)."""
        self._stop_run(chat)
        self._begin(chat, t)
        error: dict[str, Any] = {"message": fail.message or DEFAULT_CHAT_ERROR_MESSAGE}
        if fail.detail is not None:
            error["detail"] = fail.detail
        error["kind"] = fail.kind
        if fail.provider is not None:
            error["provider"] = fail.provider
        error["retryable"] = fail.retryable
        if fail.status_code is not None:
            error["status_code"] = fail.status_code
        chat.last_error = error
        chat.status = STATUS_ERROR
        self._publish("status_change", chat)

    def _finish_interruption(self, chat: FakeChat, t: float) -> None:
        """FinishInterruption: commit the partial output, then I0 → W or I1 → promote the
        head and run (no intermediate ``waiting``; server-behaviour 2.2)."""
        run = self.runs.get(chat.id)
        chat.interrupt_at = None
        self._begin(chat, t)
        if run is not None and run.phase == "ops":
            partial = run.acc.partial()
            if partial:
                self._insert(chat, t, "assistant", partial, model_config_id=run.model_config_id)
        self._stop_run(chat)
        if chat.queue:
            self._start_run(chat, self._promote_head(chat, t), t)
            chat.status = STATUS_RUNNING
        else:
            chat.status = STATUS_WAITING
        self._publish("status_change", chat)

    def _cancel_requires_action(self, chat: FakeChat, t: float) -> None:
        """CancelRequiresAction at the deadline: cancellation results, then the model
        continues (server-behaviour 2.2, 8.8)."""
        self._begin(chat, t)
        cancelled = self._cancel_pending(chat, t, CANCEL_BY_TIMEOUT)
        chat.status = STATUS_RUNNING
        self._resume_run(chat, t, [CANCEL_BY_TIMEOUT for _ in cancelled])
        self._publish("status_change", chat)

    # -- time ---------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Advance every simulated worker and timer to ``now`` (idempotent; time never goes
        backwards). Events are processed at their scheduled times, so the outcome does not
        depend on how often ``tick`` is called."""
        now = self._advance_clock(now)
        for chat in list(self.chats.values()):
            self._advance_chat(chat, now)

    def _advance_chat(self, chat: FakeChat, now: float) -> None:
        # Every event moves a finite script forward or ends a timer, so this terminates.
        while True:
            due = self._chat_deadline(chat)
            if due is None or due > now:
                return
            self._advanced.add(chat.id)
            if chat.interrupt_at is not None and chat.interrupt_at <= due:
                self._finish_interruption(chat, chat.interrupt_at)
            elif (
                chat.status == STATUS_REQUIRES_ACTION
                and chat.requires_action_deadline is not None
                and chat.requires_action_deadline <= due
            ):
                self._cancel_requires_action(chat, chat.requires_action_deadline)
            else:
                run = self.runs[chat.id]
                self._run_one(chat, run, run.next_at)

    def drain_advanced(self) -> set[str]:
        """The ids of chats whose workers or timers advanced since the last call, so an
        adapter can wake only the connections that may have something to send."""
        advanced, self._advanced = self._advanced, set()
        return advanced

    def _chat_deadline(self, chat: FakeChat) -> float | None:
        if chat.interrupt_at is not None:
            return chat.interrupt_at
        if chat.status == STATUS_REQUIRES_ACTION:
            return chat.requires_action_deadline
        if chat.status == STATUS_RUNNING:
            # A running chat without a run is one whose worker is gone (a lease stall).
            run = self.runs.get(chat.id)
            return run.next_at if run is not None else None
        return None

    def next_deadline(self) -> float | None:
        """The monotonic time of the next worker or timer event, or ``None``."""
        deadlines = [
            d for d in (self._chat_deadline(c) for c in self.chats.values()) if d is not None
        ]
        return min(deadlines) if deadlines else None

    # -- validation helpers -------------------------------------------------------------------

    def _validate_content(self, raw: Any, field: str = "content") -> list[dict[str, Any]]:
        """Input parts → stored parts (server-behaviour 1.5 item 4): text is trimmed."""
        if not isinstance(raw, list) or not raw:
            raise FakeApiError(400, "Content is required.")
        out: list[dict[str, Any]] = []
        for n, part in enumerate(raw):
            where = f"{field}[{n}]"
            if not isinstance(part, dict):
                raise FakeApiError(400, "Invalid input part.", detail=f"{where} must be an object.")
            kind = part.get("type")
            if kind == "text":
                text = part.get("text")
                if not isinstance(text, str) or not text.strip():
                    raise FakeApiError(
                        400, "Invalid input part.", detail=f"{where}.text cannot be empty."
                    )
                out.append({"type": "text", "text": text.strip()})
            elif kind == "file":
                file_id = part.get("file_id")
                if not isinstance(file_id, str) or not file_id:
                    raise FakeApiError(
                        400,
                        "Invalid input part.",
                        detail=f"{where}.file_id is required for file parts.",
                    )
                stored = self.files.get(file_id.lower())
                if stored is None:
                    raise FakeApiError(
                        400,
                        "Invalid input part.",
                        detail=f"{where} references a file that does not exist.",
                    )
                out.append(
                    {
                        "type": "file",
                        "media_type": stored.media_type,
                        "name": stored.name,
                        "file_id": stored.id,
                    }
                )
            elif kind == "file-reference":
                ref: dict[str, Any] = {"type": "file-reference"}
                for key, kind_of in (
                    ("file_name", str),
                    ("start_line", int),
                    ("end_line", int),
                    ("content", str),
                ):
                    value = part.get(key, "" if kind_of is str else 0)
                    if not isinstance(value, kind_of) or isinstance(value, bool):
                        raise FakeApiError(
                            400, "Invalid input part.", detail=f"{where}.{key} is invalid."
                        )
                    ref[key] = value
                if not ref["file_name"]:
                    raise FakeApiError(
                        400, "Invalid input part.", detail=f"{where}.file_name is required."
                    )
                out.append(ref)
            else:
                raise FakeApiError(
                    400, "Invalid input part.", detail=f'{where}.type "{kind}" is not supported.'
                )
        if sum(1 for p in out if p["type"] == "file") > MAX_ATTACHMENTS_PER_CHAT:
            raise FakeApiError(400, "Chat attachment limit reached.")
        return out

    def _resolve_model_config(self, raw: Any, fallback: str | None) -> str:
        if raw is None or raw == "":
            if fallback is not None:
                return fallback
            spec = self._default_spec()
            if spec is None:
                raise FakeApiError(
                    400,
                    "No chat model is available in this organization.",
                    detail="Ask an organization administrator to configure and enable a chat model.",
                )
            return self.model_config_ids[spec.model]
        if not isinstance(raw, str) or UUID_RE.match(raw.lower()) is None:
            raise FakeApiError(400, "Invalid model config ID.")
        found = self._spec_by_id(raw.lower())
        if found is None or not found.enabled:
            raise FakeApiError(400, "Invalid model_config_id: model config not found or disabled.")
        return raw.lower()

    @staticmethod
    def _validate_reasoning_effort(raw: Any) -> str | None:
        if raw is None or raw == "":
            return None
        if not isinstance(raw, str) or raw not in REASONING_EFFORTS:
            raise FakeApiError(400, "Invalid reasoning_effort value.")
        return raw

    @staticmethod
    def _validate_plan_mode(raw: Any) -> str | None:
        if raw is None:
            return None
        if raw not in ("", "plan"):
            raise FakeApiError(400, "Invalid plan_mode value.")
        return str(raw)

    @staticmethod
    def _validate_uuid_list(raw: Any, message: str) -> list[str] | None:
        if raw is None:
            return None
        if not isinstance(raw, list) or not all(
            isinstance(v, str) and UUID_RE.match(v.lower()) for v in raw
        ):
            raise FakeApiError(400, message)
        return [v.lower() for v in raw]

    @staticmethod
    def _validate_labels(raw: Any) -> dict[str, str] | None:
        if raw is None:
            return None
        if not isinstance(raw, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) for k, v in raw.items()
        ):
            raise FakeApiError(400, "Invalid labels.")
        return dict(raw)

    def _link_files(self, chat: FakeChat, content: list[dict[str, Any]]) -> None:
        for part in content:
            if part["type"] == "file" and part["file_id"] not in chat.file_ids:
                chat.file_ids.append(part["file_id"])
        # A chat keeps the 50 most recent attachments (server-behaviour 1.2).
        del chat.file_ids[: max(0, len(chat.file_ids) - MAX_ATTACHMENTS_PER_CHAT)]

    # -- operations -----------------------------------------------------------------------------

    def create_chat(self, body: Mapping[str, Any], now: float) -> FakeChat:
        """``POST /chats`` (server-behaviour 1.5): N → R0, status ``running`` at once."""
        t = self._advance_clock(now)
        org = body.get("organization_id")
        if not isinstance(org, str) or not org:
            raise FakeApiError(400, "organization_id is required.")
        if org.lower() != self.organization_id:
            raise FakeApiError(403, "You are not a member of the specified organization.")
        content = self._validate_content(body.get("content"))
        workspace = body.get("workspace_id")
        if workspace is not None and (
            not isinstance(workspace, str) or UUID_RE.match(workspace.lower()) is None
        ):
            raise FakeApiError(
                400, "Workspace not found or you do not have access to this resource"
            )
        model_config_id = self._resolve_model_config(body.get("model_config_id"), None)
        plan_mode = self._validate_plan_mode(body.get("plan_mode"))
        mcp = self._validate_uuid_list(
            body.get("mcp_server_ids"), "One or more MCP server IDs are invalid or disabled."
        )
        labels = self._validate_labels(body.get("labels"))
        tools = self._validate_dynamic_tools(body.get("unsafe_dynamic_tools"))
        client_type = body.get("client_type") or "api"
        if client_type not in ("api", "ui"):
            raise FakeApiError(400, "Invalid client_type.")
        effort = self._validate_reasoning_effort(body.get("reasoning_effort"))
        system_prompt = body.get("system_prompt")
        title = (
            _content_text(content).strip().splitlines()[0]
            if _content_text(content).strip()
            else "New Chat"
        )
        chat = FakeChat(
            id=new_uuid(self._rng),
            organization_id=self.organization_id,
            owner_id=self.user_id,
            owner_username=self.config.username,
            title=title[:MAX_TITLE_LENGTH],
            status=STATUS_RUNNING,
            created_at=self.timestamp(t),
            updated_at=self.timestamp(t),
            last_model_config_id=model_config_id,
            last_reasoning_effort=effort,
            workspace_id=workspace.lower() if isinstance(workspace, str) else None,
            mcp_server_ids=mcp or [],
            labels=labels or {},
            plan_mode=plan_mode or None,
            client_type=str(client_type),
            system_prompt=system_prompt if isinstance(system_prompt, str) else None,
            dynamic_tools=tools,
        )
        self.chats[chat.id] = chat
        self._begin(chat, t)
        self._link_files(chat, content)
        message = self._insert(
            chat, t, "user", content, created_by=self.user_id, model_config_id=model_config_id
        )
        self._start_run(chat, message, t)
        self._publish("created", chat)
        return chat

    @staticmethod
    def _validate_dynamic_tools(raw: Any) -> list[dict[str, Any]]:
        if raw is None:
            return []
        if not isinstance(raw, list):
            raise FakeApiError(400, "Invalid dynamic tools.")
        if len(raw) > MAX_DYNAMIC_TOOLS:
            raise FakeApiError(
                400, "Too many dynamic tools.", detail=f"Maximum is {MAX_DYNAMIC_TOOLS}."
            )
        seen: set[str] = set()
        out = []
        for tool in raw:
            name = tool.get("name") if isinstance(tool, dict) else None
            if not isinstance(name, str) or not name.strip():
                raise FakeApiError(400, "Dynamic tool name must not be empty.")
            if name in seen:
                raise FakeApiError(
                    400,
                    "Duplicate dynamic tool name.",
                    detail=f'Tool "{name}" appears more than once.',
                )
            seen.add(name)
            out.append(dict(tool))
        return out

    def send_message(self, chat: FakeChat, body: Mapping[str, Any], now: float) -> dict[str, Any]:
        """``POST /chats/{chat}/messages`` in every state (server-behaviour 2.2, 2.5, 8.3)."""
        t = self._advance_clock(now)
        if chat.archived:
            raise FakeApiError(400, "Cannot send messages to an archived chat.")
        busy = body.get("busy_behavior")
        if busy in (None, ""):
            busy = "queue"
        if busy not in ("queue", "interrupt"):
            raise FakeApiError(
                400, "Invalid busy_behavior value.", detail='Must be "queue" or "interrupt".'
            )
        content = self._validate_content(body.get("content"))
        model_config_id = self._resolve_model_config(
            body.get("model_config_id"), chat.last_model_config_id
        )
        effort = self._validate_reasoning_effort(body.get("reasoning_effort"))
        plan_mode = self._validate_plan_mode(body.get("plan_mode"))
        mcp = self._validate_uuid_list(
            body.get("mcp_server_ids"), "One or more MCP server IDs are invalid or disabled."
        )
        status = chat.status
        direct = status in (STATUS_WAITING, STATUS_ERROR) and not chat.queue
        if not direct and len(chat.queue) >= self.config.max_queue:
            raise FakeApiError(
                429,
                "Message queue is full.",
                detail=f"Maximum {self.config.max_queue} messages can be queued.",
            )
        self._begin(chat, t)
        chat.last_model_config_id = model_config_id
        if effort is not None:
            chat.last_reasoning_effort = effort
        if plan_mode is not None:
            chat.plan_mode = plan_mode or None
        if mcp is not None:
            chat.mcp_server_ids = mcp
        self._link_files(chat, content)
        if direct:
            # W, E0 → R0: straight into history; last_error cleared.
            cancelled = self._cancel_pending(chat, t, CANCEL_BY_USER_MESSAGE)
            message = self._insert(
                chat, t, "user", content, created_by=self.user_id, model_config_id=model_config_id
            )
            chat.last_error = None
            chat.status = STATUS_RUNNING
            self._start_run(chat, message, t)
            self._publish("status_change", chat)
            return {
                "message": self.message_json(message),
                "messages": [self.message_json(m) for m in [*cancelled, message]],
                "queued": False,
            }
        queued = FakeQueuedMessage(
            id=self._next_queued_id(),
            chat_id=chat.id,
            content=content,
            created_at=self.timestamp(t),
            created_by=self.user_id,
            model_config_id=model_config_id,
        )
        chat.queue.append(queued)
        self._queue_changed(chat)
        response: dict[str, Any] = {"queued": True, "queued_message": self.queued_json(queued)}
        if status == STATUS_ERROR:
            # E1 → R1: the new message joins the tail and the head is promoted.
            promoted = self._promote_head(chat, t)
            chat.last_error = None
            chat.status = STATUS_RUNNING
            self._start_run(chat, promoted, t)
            response["messages"] = [self.message_json(promoted)]
            self._publish("status_change", chat)
        elif status == STATUS_RUNNING and busy == "interrupt":
            chat.status = STATUS_INTERRUPTING
            chat.interrupt_at = t + self.config.interrupt_delay
            self._publish("status_change", chat)
        elif status == STATUS_REQUIRES_ACTION and busy == "interrupt":
            cancelled = self._cancel_pending(chat, t, CANCEL_BY_USER_MESSAGE)
            chat.status = STATUS_RUNNING
            self._resume_run(chat, t, [CANCEL_BY_USER_MESSAGE for _ in cancelled])
            response["messages"] = [self.message_json(m) for m in cancelled]
            self._publish("status_change", chat)
        else:
            # Every send is a transition, and transitions publish (server-behaviour 6).
            self._publish("status_change", chat)
        return response

    def interrupt(self, chat: FakeChat, now: float) -> FakeChat:
        """``POST /chats/{chat}/interrupt``: returns at once (server-behaviour 8.7); R → I
        with a wind-down after ``interrupt_delay``; A → R with cancellations (D4); 409 in W,
        E and I."""
        t = self._advance_clock(now)
        if chat.archived:
            raise FakeApiError(400, "Cannot interrupt an archived chat.")
        if chat.status == STATUS_RUNNING:
            self._begin(chat, t)
            chat.status = STATUS_INTERRUPTING
            chat.interrupt_at = t + self.config.interrupt_delay
        elif chat.status == STATUS_REQUIRES_ACTION:
            self._begin(chat, t)
            cancelled = self._cancel_pending(chat, t, CANCEL_BY_USER)
            chat.status = STATUS_RUNNING
            self._resume_run(chat, t, [CANCEL_BY_USER for _ in cancelled])
        else:
            raise FakeApiError(409, "Chat is not in an interruptible state.")
        self._publish("status_change", chat)
        return chat

    def submit_tool_results(self, chat: FakeChat, body: Mapping[str, Any], now: float) -> None:
        """``POST /chats/{chat}/tool-results``: exact-set validation (server-behaviour 5.4)."""
        t = self._advance_clock(now)
        if chat.archived:
            raise FakeApiError(400, "Cannot submit tool results to an archived chat.")
        results = body.get("results")
        if results is not None and not isinstance(results, list):
            raise FakeApiError(
                400, "Request body must be valid JSON.", detail="results must be an array"
            )
        if not results:
            raise FakeApiError(400, "At least one tool result is required.")
        if chat.status != STATUS_REQUIRES_ACTION:
            raise FakeApiError(
                409,
                "Chat is not waiting for tool results.",
                detail=f'chat status is "{chat.status}", expected "requires_action"',
            )
        pending = {str(c.get("tool_call_id")): c for c in chat.pending_tool_calls()}
        seen: list[str] = []
        for result in results:
            call_id = result.get("tool_call_id") if isinstance(result, dict) else None
            if not isinstance(call_id, str):
                raise FakeApiError(400, "Invalid tool result.", detail="tool_call_id is required.")
            if call_id in seen:
                raise FakeApiError(
                    400,
                    "Duplicate tool_call_id in results.",
                    detail=f'Duplicate tool call ID "{call_id}".',
                )
            seen.append(call_id)
            assert isinstance(result, dict)
            if "output" not in result:
                raise FakeApiError(400, "Tool result output must be valid JSON.")
        for call_id in pending:
            if call_id not in seen:
                raise FakeApiError(
                    400, "Missing tool result.", detail=f'Missing result for tool call "{call_id}".'
                )
        for call_id in seen:
            if call_id not in pending:
                raise FakeApiError(
                    400,
                    "Unexpected tool result.",
                    detail=f'No pending tool call with ID "{call_id}".',
                )
        self._begin(chat, t)
        by_id = {r["tool_call_id"]: r for r in results}
        outputs = []
        for call_id, call in pending.items():
            result = by_id[call_id]
            part: dict[str, Any] = {
                "type": "tool-result",
                "tool_call_id": call_id,
                "tool_name": call.get("tool_name", ""),
                "result": result.get("output"),
            }
            if result.get("is_error") is True:
                part["is_error"] = True
            part["created_at"] = self.timestamp(t)
            self._insert(chat, t, "tool", [part])
            outputs.append(result.get("output"))
        chat.requires_action_deadline = None
        chat.status = STATUS_RUNNING
        self._resume_run(chat, t, outputs)
        self._publish("status_change", chat)

    def update_chat(self, chat: FakeChat, body: Mapping[str, Any], now: float) -> None:
        """``PATCH /chats/{chat}``: title, archive (server-behaviour 2.4), pin, labels, plan
        mode. 204 on success."""
        t = self._advance_clock(now)
        title = body.get("title")
        if title is not None:
            if not isinstance(title, str) or not title.strip():
                raise FakeApiError(400, "Title cannot be empty.")
            if len(title.strip()) > MAX_TITLE_LENGTH:
                raise FakeApiError(400, f"Title must be at most {MAX_TITLE_LENGTH} characters.")
        pin = body.get("pin_order")
        if pin is not None:
            if not isinstance(pin, int) or isinstance(pin, bool) or pin < 0:
                raise FakeApiError(400, "Pin order must be non-negative.")
            if pin > 0 and (chat.archived or body.get("archived") is True):
                raise FakeApiError(400, "Cannot pin an archived chat.")
        plan_mode = self._validate_plan_mode(body.get("plan_mode"))
        labels = self._validate_labels(body.get("labels"))
        archived = body.get("archived")
        if archived is not None:
            if not isinstance(archived, bool):
                raise FakeApiError(
                    400, "Request body must be valid JSON.", detail="archived must be a boolean"
                )
            if archived and chat.archived:
                raise FakeApiError(400, "Chat is already archived.")
            if not archived and not chat.archived:
                raise FakeApiError(400, "Chat is already not archived.")
            if archived and chat.status in ACTIVE_STATUSES:
                raise FakeApiError(409, ARCHIVE_CONFLICT, detail="transition not allowed")
        self._begin(chat, t)
        if title is not None:
            chat.title = title.strip()
            self._publish("title_change", chat)
        if pin is not None:
            chat.pin_order = pin
        if plan_mode is not None:
            chat.plan_mode = plan_mode or None
        if labels is not None:
            chat.labels = labels
        if archived is not None:
            chat.archived = archived

    def delete_queued(self, chat: FakeChat, queued_id: str, now: float) -> None:
        """``DELETE /chats/{chat}/queue/{id}``: 204, 404 (not in a non-empty queue), 409
        (empty queue) (server-behaviour 2.5, 8.6)."""
        t = self._advance_clock(now)
        qid = parse_positive_int(queued_id)
        if qid is None:
            raise FakeApiError(400, "Invalid queued message ID.")
        if chat.archived:
            raise FakeApiError(409, "Chat is not in a state that allows deleting queued messages.")
        if not chat.queue:
            raise FakeApiError(409, "Chat has no queued messages to delete.")
        index = next((n for n, q in enumerate(chat.queue) if q.id == qid), None)
        if index is None:
            raise FakeApiError(404, "Queued message not found.")
        self._begin(chat, t)
        del chat.queue[index]
        self._queue_changed(chat)

    def promote_queued(self, chat: FakeChat, queued_id: str, now: float) -> None:
        """``POST /chats/{chat}/queue/{id}/promote`` (server-behaviour 2.2): E1/A1 promote at
        once; R1/I1 move it to the head and interrupt."""
        t = self._advance_clock(now)
        if chat.archived:
            raise FakeApiError(400, "Cannot promote queued messages in an archived chat.")
        qid = parse_positive_int(queued_id)
        if qid is None:
            raise FakeApiError(400, "Invalid queued message ID.")
        if not chat.queue:
            raise FakeApiError(409, "Chat has no queued messages to promote.")
        index = next((n for n, q in enumerate(chat.queue) if q.id == qid), None)
        if index is None:
            raise FakeApiError(404, "Queued message not found.")
        self._begin(chat, t)
        if index:
            chat.queue.insert(0, chat.queue.pop(index))
            self._queue_changed(chat)
        if chat.status in (STATUS_ERROR, STATUS_REQUIRES_ACTION, STATUS_WAITING):
            self._cancel_pending(chat, t, CANCEL_BY_PROMOTION)
            promoted = self._promote_head(chat, t)
            chat.last_error = None
            chat.status = STATUS_RUNNING
            self._start_run(chat, promoted, t)
        else:
            chat.status = STATUS_INTERRUPTING
            if chat.interrupt_at is None:
                chat.interrupt_at = t + self.config.interrupt_delay
        self._publish("status_change", chat)

    def edit_message(
        self, chat: FakeChat, message_id: str, body: Mapping[str, Any], now: float
    ) -> dict[str, Any]:
        """``PATCH /chats/{chat}/messages/{id}``: any non-archived state → R0; soft-deletes the
        message and everything after it, clears the queue, inserts the replacement. Streams
        answer with ``history_reset`` (server-behaviour 2.2, 3.3; D15)."""
        t = self._advance_clock(now)
        if chat.archived:
            raise FakeApiError(400, "Cannot edit messages in an archived chat.")
        mid = parse_positive_int(message_id)
        if mid is None:
            raise FakeApiError(400, "Invalid chat message ID.")
        target = next((m for m in chat.visible_messages() if m.id == mid), None)
        if target is None:
            raise FakeApiError(404, "Chat message not found.")
        if target.role != "user":
            raise FakeApiError(400, "Only user messages can be edited.")
        content = self._validate_content(body.get("content"))
        model_config_id = self._resolve_model_config(
            body.get("model_config_id"), target.model_config_id or chat.last_model_config_id
        )
        self._stop_run(chat)
        chat.interrupt_at = None
        self._begin(chat, t)
        self._history_changed(chat)
        deleted = [m for m in chat.visible_messages() if m.id >= mid]
        for message in deleted:
            message.deleted = True
            message.changed_at = chat.history_version
        chat.edited = True
        if chat.queue:
            chat.queue.clear()
            self._queue_changed(chat)
        self._cancel_pending(chat, t, CANCEL_BY_EDIT)
        self._link_files(chat, content)
        replacement = self._insert(
            chat, t, "user", content, created_by=self.user_id, model_config_id=model_config_id
        )
        chat.last_error = None
        chat.last_model_config_id = model_config_id
        chat.status = STATUS_RUNNING
        self._start_run(chat, replacement, t)
        self._publish("status_change", chat)
        return {
            "message": self.message_json(replacement),
            "messages": [self.message_json(replacement)],
            "deleted_message_ids": [m.id for m in deleted],
        }

    def revise_message(
        self, chat_id: str, message_id: int, content: list[dict[str, Any]], now: float
    ) -> FakeMessage:
        """Rewrite a committed message in place, as a lifecycle hook rewriting tool-call
        input does: a new revision under the same id, which every stream re-sends as a
        ``message`` event whatever its ``after_id`` (server-behaviour 3.3). Best used while no
        step is streaming: a history change starts a new episode. ``KeyError`` when the chat
        or visible message does not exist."""
        self.tick(now)
        t = self._advance_clock(now)
        chat = self.chats[chat_id]
        found = next((m for m in chat.visible_messages() if m.id == message_id), None)
        if found is None:
            raise KeyError(message_id)
        self._begin(chat, t)
        self._history_changed(chat)
        found.content = [dict(p) for p in content]
        found.changed_at = chat.history_version
        return found

    def list_messages(self, chat: FakeChat, query: Query) -> dict[str, Any]:
        """``GET /chats/{chat}/messages`` (server-behaviour 7)."""
        validations = []
        cursors: dict[str, int | None] = {}
        for key in ("before_id", "after_id"):
            raw = query.get(key)
            cursors[key] = None
            if raw is not None:
                value = parse_positive_int(raw)
                if value is None:
                    validations.append({"field": key, "detail": "must be a positive integer"})
                cursors[key] = value
        if validations:
            raise FakeApiError(
                400, "Query parameters have invalid values.", validations=validations
            )
        raw_limit = query.get("limit")
        limit = MESSAGES_LIMIT_DEFAULT
        if raw_limit is not None:
            if not re.fullmatch(r"-?\d{1,10}", raw_limit.strip()):
                raise FakeApiError(
                    400,
                    "Query parameters have invalid values.",
                    validations=[{"field": "limit", "detail": "must be an integer"}],
                )
            limit = int(raw_limit)
            if not 1 <= limit <= MESSAGES_LIMIT_MAX:
                raise FakeApiError(400, "Invalid limit parameter (1-200).")
        before, after = cursors["before_id"], cursors["after_id"]
        if before is not None and after is not None and after >= before:
            raise FakeApiError(400, "after_id must be less than before_id.")
        visible = chat.visible_messages()
        if after is not None and before is None:
            rows = [m for m in visible if m.id > after]
        else:
            rows = [
                m
                for m in reversed(visible)
                if (before is None or m.id < before) and (after is None or m.id > after)
            ]
        page = rows[: limit + 1]
        queued = chat.queue if before is None and after is None else []
        return {
            "messages": [self.message_json(m) for m in page[:limit]],
            "queued_messages": [self.queued_json(q) for q in queued],
            "has_more": len(page) > limit,
        }

    def upload_file(
        self, query: Query, headers: Mapping[str, str], body: bytes, now: float
    ) -> FakeFile:
        """``POST /chats/files?organization=`` (server-behaviour 1.2; wire 7): allowlist,
        byte classification, 10 MiB."""
        t = self._advance_clock(now)
        org = query.get("organization")
        if not org:
            raise FakeApiError(400, "Missing organization query parameter.")
        if UUID_RE.match(org.lower()) is None:
            raise FakeApiError(400, "Invalid organization ID.")
        if org.lower() != self.organization_id:
            raise FakeApiError(403, "You are not a member of the specified organization.")
        declared = headers.get("content-type", "").split(";")[0].strip().lower()
        if len(body) > MAX_ATTACHMENT_BYTES:
            raise FakeApiError(
                413, "File too large.", detail=f"Maximum file size is {MAX_ATTACHMENT_BYTES} bytes."
            )
        if declared != "application/octet-stream" and declared not in ALLOWED_MEDIA_TYPES:
            raise FakeApiError(
                400,
                "Unsupported file type.",
                detail="Allowed types: " + ", ".join(ALLOWED_MEDIA_TYPES) + ".",
            )
        if not body:
            raise FakeApiError(400, "Invalid file.", detail="The file is empty.")
        detected = _classify(body)
        if declared == "application/octet-stream":
            if detected not in ALLOWED_MEDIA_TYPES:
                raise FakeApiError(
                    400,
                    "Unsupported file type.",
                    detail="Allowed types: " + ", ".join(ALLOWED_MEDIA_TYPES) + ".",
                )
            media_type = detected
        elif not _compatible(declared, detected, body):
            raise FakeApiError(400, "File content type does not match Content-Type header.")
        else:
            media_type = declared
        name = _disposition_filename(headers.get("content-disposition"))
        if not name:
            if self.config.require_upload_filename:
                raise FakeApiError(400, "Filename is required.")
            name = "file"
        stored = FakeFile(
            id=new_uuid(self._rng),
            organization_id=self.organization_id,
            owner_id=self.user_id,
            name=name,
            media_type=media_type,
            data=bytes(body),
            created_at=self.timestamp(t),
        )
        self.files[stored.id] = stored
        return stored

    def cost_json(self, chat: FakeChat) -> dict[str, Any]:
        """``GET /chats/{chat}/cost``: a made-up price per token, for the whole chat."""
        micros = 0
        count = 0
        for message in chat.visible_messages():
            if message.role == "assistant" and message.usage:
                count += 1
                micros += 3 * message.usage.get("input_tokens", 0) + 15 * message.usage.get(
                    "output_tokens", 0
                )
        return {
            "chat_id": chat.id,
            "total_cost_micros": micros,
            "request_count": count,
            "unpriced_request_count": 0,
        }

    def list_chats(self, query: Query) -> list[dict[str, Any]]:
        """``GET /chats``: root chats, newest first; ``q`` understands ``archived:`` and
        ``title:``; ``label=k:v`` filters (AND); ``limit``/``offset`` paginate."""
        archived: bool | None = False
        title: str | None = None
        for term in (query.get("q") or "").split():
            key, _, value = term.partition(":")
            if key == "archived" and value in ("true", "false"):
                archived = value == "true"
            elif key == "title" and value:
                title = value.lower()
            elif key in ("has_unread", "pr_status", "source", "search"):
                continue
            else:
                raise FakeApiError(400, "Invalid chat search query.")
        labels = []
        for item in query.get_all("label"):
            key, sep, value = item.partition(":")
            if not sep or not key:
                raise FakeApiError(400, f"Invalid label filter: {item!r}")
            labels.append((key, value))
        # Newest activity first; ties in creation order, newest first.
        ordered = sorted(
            enumerate(self.chats.values()), key=lambda nc: (nc[1].updated_at, nc[0]), reverse=True
        )
        chats = [
            c
            for _, c in ordered
            if (archived is None or c.archived == archived)
            and (title is None or title in c.title.lower())
            and all(c.labels.get(k) == v for k, v in labels)
        ]
        offset = parse_positive_int(query.get("offset")) or 0
        limit = parse_positive_int(query.get("limit"))
        chats = chats[offset:]
        if limit is not None:
            chats = chats[:limit]
        return [self.chat_json(c) for c in chats]

    # -- HTTP -----------------------------------------------------------------------------------

    def _route(self, method: str, path: str) -> RouteMatch | FakeApiError:
        return match_route(method, path, legacy_only=self.config.legacy_only)

    def _authorise(self, headers: Mapping[str, str], query: Query) -> None:
        token = request_token(headers, query)
        if token is None:
            raise FakeApiError(
                401,
                'Cookie "coder_session_token" or query parameter must be provided.',
            )
        if not token_matches(token, self.config.token):
            raise FakeApiError(401, "API key is invalid.")

    def _lookup_chat(self, route: RouteMatch) -> FakeChat:
        chat_id = parse_uuid_param(route.params["chat"])
        chat = self.chats.get(chat_id)
        if chat is None:
            raise FakeApiError(404, "Resource not found or you do not have access to this resource")
        return chat

    @staticmethod
    def _fault_ops(route: RouteMatch, body: bytes) -> tuple[str, ...]:
        if route.op == "update_chat" and b'"archived"' in body:
            return (route.op, "archive_chat")
        return (route.op,)

    def handle_http(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str] | Iterable[tuple[str, str]],
        body: bytes,
        now: float,
    ) -> FakeHttpResponse:
        """Answer one REST request (server-behaviour 1). ``headers`` may be a mapping or
        pairs; names are matched case-insensitively. Never raises for bad input: every
        refusal is an error response."""
        self.tick(now)
        hdrs = _lower_headers(headers)
        path, query = parse_target(target)
        method = method.upper()
        route = self._route(method, path)
        op = route.op if isinstance(route, RouteMatch) else "unknown"
        delay = 0.0
        try:
            if isinstance(route, FakeApiError):
                raise route
            self._authorise(hdrs, query)
            chat_id = route.params.get("chat", "").lower() or None
            failure = self.faults.claim_request_failure(self._fault_ops(route, body), chat_id)
            if failure is not None:
                logger.debug("fake server: injected %d for %s", failure.status, op)
                raise FakeApiError(
                    failure.status,
                    failure.message or _STATUS_TEXT.get(failure.status, "Injected failure."),
                    detail=failure.detail,
                )
            delay = self.faults.claim_request_delay(self._fault_ops(route, body), chat_id)
            if self.faults.chatd_disabled and op not in READ_ONLY_OPS:
                raise _chatd_disabled()
            response = self._dispatch(route, query, hdrs, body, now)
        except FakeApiError as exc:
            response = error_response(exc)
        if delay:
            response = FakeHttpResponse(
                status=response.status, headers=response.headers, body=response.body, delay=delay
            )
        self.counters.record(method, _redact(target), op, response.status)
        return response

    def _dispatch(
        self, route: RouteMatch, query: Query, headers: Mapping[str, str], body: bytes, now: float
    ) -> FakeHttpResponse:
        op = route.op
        if op in UPGRADE_OPS:
            self._check_upgrade(route, query)
            return self._json(426, {"message": "WebSocket upgrade required."})
        if op == "list_chats":
            return self._json(200, self.list_chats(query))
        if op == "create_chat":
            if len(body) > MAX_CREATE_BODY_BYTES:
                raise FakeApiError(413, "Request body too large.")
            chat = self.create_chat(parse_json_object(body), now)
            return self._json(201, self.chat_json(chat))
        if op == "upload_chat_file":
            stored = self.upload_file(query, headers, body, now)
            return self._json(201, {"id": stored.id})
        if op == "get_chat_file":
            file_id = route.params["file"].lower()
            if UUID_RE.match(file_id) is None:
                raise FakeApiError(400, "Invalid file ID.")
            found = self.files.get(file_id)
            if found is None:
                raise FakeApiError(
                    404, "Resource not found or you do not have access to this resource"
                )
            stored = found
            disposition = "inline" if stored.media_type.startswith("image/") else "attachment"
            return FakeHttpResponse(
                status=200,
                headers=(
                    ("Content-Type", stored.media_type),
                    (
                        "Content-Disposition",
                        f'{disposition}; filename="{_ascii_name(stored.name)}"',
                    ),
                    ("Cache-Control", "private, max-age=31536000, immutable"),
                ),
                body=stored.data,
            )
        if op == "list_models":
            if route.params["org"].lower() != self.organization_id:
                raise FakeApiError(
                    404, "Resource not found or you do not have access to this resource"
                )
            return self._json(200, self.model_catalog_json())
        if op == "list_models_default_org":
            return self._json(200, self.model_catalog_json())
        if op == "list_model_configs":
            return self._json(200, [self.model_config_json(s) for s in self.config.models])
        chat = self._lookup_chat(route)
        if op == "get_chat":
            return self._json(200, self.chat_json(chat))
        if op == "update_chat":
            self.update_chat(chat, parse_json_object(body), now)
            return FakeHttpResponse(status=204)
        if op == "get_messages":
            return self._json(200, self.list_messages(chat, query))
        if op == "create_chat_message":
            return self._json(200, self.send_message(chat, parse_json_object(body), now))
        if op == "edit_chat_message":
            return self._json(
                200, self.edit_message(chat, route.params["message"], parse_json_object(body), now)
            )
        if op == "interrupt_chat":
            return self._json(200, self.chat_json(self.interrupt(chat, now)))
        if op == "submit_tool_results":
            if len(body) > MAX_CREATE_BODY_BYTES:
                raise FakeApiError(413, "Request body too large.")
            self.submit_tool_results(chat, parse_json_object(body), now)
            return FakeHttpResponse(status=204)
        if op == "delete_queued_message":
            self.delete_queued(chat, route.params["queued"], now)
            return FakeHttpResponse(status=204)
        if op == "promote_queued_message":
            self.promote_queued(chat, route.params["queued"], now)
            return self._json(202, {"message": "Queued message promotion accepted."})
        assert op == "get_chat_cost", op
        return self._json(200, self.cost_json(chat))

    # -- WebSocket upgrades -----------------------------------------------------------------------

    def _check_upgrade(self, route: RouteMatch, query: Query) -> tuple[FakeChat | None, int]:
        """The checks the server runs before accepting a stream or watch socket
        (server-behaviour 3.1): unknown chat 404, bad ``after_id`` 400."""
        if route.op == "watch_chats":
            return None, 0
        chat = self._lookup_chat(route)
        raw = query.get("after_id")
        after_id = 0
        if raw is not None and raw != "":
            if not re.fullmatch(r"\d{1,19}", raw.strip()) or int(raw) >= 2**63:
                raise FakeApiError(400, "Invalid after_id parameter.")
            after_id = int(raw)
        return chat, after_id

    def handle_upgrade(
        self,
        target: str,
        headers: Mapping[str, str] | Iterable[tuple[str, str]],
        now: float,
    ) -> StreamSubscription | WatchSubscription | FakeHttpResponse:
        """Answer a WebSocket upgrade request: a subscription to accept, or the HTTP
        rejection to send instead (401, 404, 400, 503, or an injected status)."""
        self.tick(now)
        hdrs = _lower_headers(headers)
        path, query = parse_target(target)
        route = self._route("GET", path)
        op = route.op if isinstance(route, RouteMatch) else "unknown"
        try:
            if isinstance(route, FakeApiError):
                raise route
            if route.op not in UPGRADE_OPS:
                raise FakeApiError(400, "This route does not accept WebSocket upgrades.")
            self._authorise(hdrs, query)
            chat_id = route.params.get("chat", "").lower() or None
            if route.op == "stream_chat" and chat_id is not None:
                self.counters.stream_dials[chat_id] += 1
            else:
                self.counters.watch_dials += 1
            if self.faults.chatd_disabled:
                raise _chatd_disabled()
            chat, after_id = self._check_upgrade(route, query)
            rejection = self.faults.claim_upgrade_rejection(
                "stream" if chat is not None else "watch", chat_id
            )
            if rejection is not None:
                logger.debug("fake server: upgrade rejected with %d", rejection.status)
                raise FakeApiError(
                    rejection.status,
                    rejection.message or _STATUS_TEXT.get(rejection.status, "Injected failure."),
                )
        except FakeApiError as exc:
            response = error_response(exc)
            self.counters.record("GET", _redact(target), op, response.status)
            return response
        self.counters.record("GET", _redact(target), op, 101)
        if chat is None:
            return self.open_watch(now)
        return self.open_stream(chat.id, after_id, now)

    def open_stream(self, chat_id: str, after_id: int, now: float) -> StreamSubscription:
        """Subscribe to a chat's stream as a connection would (server-behaviour 3); the first
        ``pull`` returns the snapshot. ``KeyError`` for an unknown chat."""
        self.tick(now)
        chat = self.chats[chat_id]
        sub = StreamSubscription(self, chat, after_id)
        self._streams.append(sub)
        self.counters.streams_accepted[chat_id] += 1
        self.counters.open_streams += 1
        return sub

    def open_watch(self, now: float) -> WatchSubscription:
        """Subscribe to the watch stream (server-behaviour 6): events from now on only."""
        self.tick(now)
        sub = WatchSubscription(self)
        self._watches.append(sub)
        self.counters.open_watches += 1
        return sub

    def _unregister(self, sub: object) -> None:
        """Forget a subscription (called once, by its ``close``)."""
        if isinstance(sub, StreamSubscription):
            self._streams.remove(sub)
            self.counters.open_streams -= 1
        else:
            assert isinstance(sub, WatchSubscription)
            self._watches.remove(sub)
            self.counters.open_watches -= 1


# -- helpers ------------------------------------------------------------------------------------

_STATUS_TEXT: Final = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    425: "Too Early",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def _chatd_disabled() -> FakeApiError:
    return FakeApiError(
        503,
        "AI Gateway must be enabled for Coder Agents functionality. Please contact your "
        "deployment administrator.",
        detail="Set CODER_AI_GATEWAY_ENABLED=true on the deployment.",
    )


def _lower_headers(headers: Mapping[str, str] | Iterable[tuple[str, str]]) -> dict[str, str]:
    pairs = headers.items() if isinstance(headers, Mapping) else headers
    return {str(k).lower(): str(v) for k, v in pairs}


def _redact(target: str) -> str:
    """The target without a ``coder_session_token`` query value (tokens are never kept)."""
    if "coder_session_token" not in target:
        return target
    return re.sub(r"(coder_session_token=)[^&]*", r"\1REDACTED", target)


def _classify(data: bytes) -> str:
    """What the bytes look like (server-behaviour 1.2: the server classifies uploads)."""
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    if data.startswith(b"%PDF-"):
        return "application/pdf"
    if b"\x00" in data:
        return "application/octet-stream"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "application/octet-stream"
    stripped = text.strip()
    if stripped[:1] in ("{", "["):
        try:
            loads(stripped)
        except ValueError:
            pass
        else:
            return "application/json"
    return "text/plain"


def _compatible(declared: str, detected: str, data: bytes) -> bool:
    if declared == detected:
        return True
    if declared in ("text/plain", "text/csv", "text/markdown"):
        return detected in ("text/plain", "application/json")
    return False


def _disposition_filename(value: str | None) -> str | None:
    """The file name of a ``Content-Disposition`` header (``filename*`` preferred)."""
    if not value:
        return None
    plain: str | None = None
    for param in value.split(";")[1:]:
        key, _, raw = param.strip().partition("=")
        key = key.strip().lower()
        raw = raw.strip()
        if key == "filename*" and "''" in raw:
            name = unquote(raw.split("''", 1)[1])
            if name:
                return name
        elif key == "filename":
            if len(raw) >= 2 and raw[0] == raw[-1] == '"':
                raw = re.sub(r"\\(.)", r"\1", raw[1:-1])
            plain = raw or None
    return plain


def _ascii_name(name: str) -> str:
    return "".join(c if 0x20 <= ord(c) < 0x7F and c not in '"\\' else "_" for c in name)
