"""The fake server's worker: plays each running chat's script as simulated time passes
(server-behaviour 2.2, 3.4, 8).

A run streams parts into the current episode's buffer one operation at a time, commits each
step, enters ``requires_action`` for client tool calls, retries, fails and finishes turns,
promoting the queue head without a terminal status in between (8.2). Nothing runs by itself:
``tick(now)`` processes every event due by ``now`` at its scheduled time, so the outcome does
not depend on how often it is called, and ``next_deadline()`` says when the next one is due.
"""

from __future__ import annotations

from typing import Any, Final

from .._constants import (
    DEFAULT_CHAT_ERROR_MESSAGE,
    STATUS_ERROR,
    STATUS_PAUSED,
    STATUS_REQUIRES_ACTION,
    STATUS_RUNNING,
    STATUS_WAITING,
)
from ._catalog import ModelCatalog
from ._context import PromptFile, ScriptContext
from ._faults import Faults
from ._rows import Episode, FakeChat, FakeMessage, FakeModelSpec
from ._run import PartOp, RetryOp, Run, StepAccumulator, UsageOp, WaitOp, compile_step
from ._script import Fail, Retry, Script
from ._store import CANCEL_BY_TIMEOUT, ChatStore, content_text
from ._subscriptions import Subscriptions

__all__ = ["Worker"]

_TEXT_MEDIA_TYPES: Final = ("application/json",)


class Worker:
    """The runs of every chat (``runs``, by chat id) and the timers around them."""

    def __init__(
        self,
        store: ChatStore,
        catalog: ModelCatalog,
        subscriptions: Subscriptions,
        faults: Faults,
    ) -> None:
        self._store = store
        self._catalog = catalog
        self._subscriptions = subscriptions
        self._faults = faults
        self.runs: dict[str, Run] = {}
        self._advanced: set[str] = set()

    # -- starting and stopping runs -------------------------------------------------------------

    def _prompt_files(self, prompt: FakeMessage) -> tuple[PromptFile, ...]:
        files = []
        for part in prompt.content:
            stored = self._store.files.get(part.get("file_id", ""))
            if part["type"] != "file" or stored is None:
                continue
            media_type = stored.media_type
            readable = media_type.startswith("text/") or media_type in _TEXT_MEDIA_TYPES
            files.append(
                PromptFile(
                    name=stored.name,
                    media_type=stored.media_type,
                    size=len(stored.data),
                    text=stored.data.decode("utf-8", "replace") if readable else None,
                )
            )
        return tuple(files)

    def start_run(self, chat: FakeChat, prompt: FakeMessage, t: float) -> None:
        """A worker takes ``chat`` to answer ``prompt``: the script book picks the script."""
        self.stop_run(chat)
        chat.turns += 1
        ctx = ScriptContext(
            chat_id=chat.id,
            prompt=content_text(prompt.content),
            tools=tuple(dict(tool) for tool in chat.dynamic_tools),
            turn=chat.turns,
            attachments=self._prompt_files(prompt),
        )
        script, ctx = self._store.config.scripts.choose(ctx)
        stall = self._faults.claim_run_stall(chat.id)
        run = Run.create(
            script,
            ctx,
            prompt.model_config_id or chat.last_model_config_id,
            t + self._store.config.run_start_delay + stall,
        )
        self.runs[chat.id] = run
        chat.worker_active = True
        chat.queued_for_capacity = stall > 0

    def stop_run(self, chat: FakeChat) -> None:
        self.runs.pop(chat.id, None)
        chat.worker_active = False
        chat.queued_for_capacity = False
        chat.retry_state = None
        self._store.close_episode(chat)

    def resume_run(self, chat: FakeChat, t: float, results: list[Any]) -> None:
        """Continue after a pause with the tool ``results`` (the next model step)."""
        run = self.runs.get(chat.id)
        if run is None:
            # No worker owns the chat (only reachable through hand-built states); a
            # fresh closing run lets the model "answer" the results.
            ctx = ScriptContext(chat_id=chat.id, prompt="")
            run = Run.create(Script(()), ctx, chat.last_model_config_id, t)
            self.runs[chat.id] = run
            chat.worker_active = True
        run.phase = "start"
        run.ops = None
        run.tool_results = list(results)
        run.next_at = t + self._delay(run)

    # -- time -----------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Advance every run and timer to ``now`` (idempotent; time never goes backwards)."""
        now = self._store.advance_clock(now)
        for chat in list(self._store.chats.values()):
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
        """The ids of chats whose runs or timers advanced since the last call."""
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
        """The monotonic time of the next run or timer event, or ``None``."""
        deadlines = [
            d for d in (self._chat_deadline(c) for c in self._store.chats.values()) if d is not None
        ]
        return min(deadlines) if deadlines else None

    # -- one step at a time -----------------------------------------------------------------------

    def _delay(self, run: Run) -> float:
        delay = run.script.chunk_delay
        return delay if delay is not None else self._store.config.chunk_delay

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
        if episode.size + size > self._store.config.part_buffer_bytes:
            # Server-behaviour 3.3: the buffer keeps at most ~1 MB per episode.
            return
        episode.size += size
        episode.parts.append((role, part))

    def _run_one(self, chat: FakeChat, run: Run, t: float) -> None:
        """Execute the run's next operation, scheduled at ``t``."""
        store = self._store
        if run.phase == "start":
            # RecordGenerationAttempt (server-behaviour 3.4 step 1).
            store.begin(chat, t)
            store.close_episode(chat)
            chat.generation_attempt += 1
            chat.retry_state = None
            chat.queued_for_capacity = False
            key = (chat.history_version, chat.generation_attempt)
            run.episode = Episode(history_version=key[0], generation_attempt=key[1])
            chat.episodes[key] = run.episode
            if run.ops is None:
                run.ops = compile_step(
                    run.steps[run.step_index] if run.step_index < len(run.steps) else [],
                    ctx=run.ctx,
                    tool_results=run.tool_results,
                    new_call_id=store.new_call_id,
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
            self._publish_part(run.episode, op.role, run.acc.add(op, store.timestamp(t)))
            run.next_at = t + self._delay(run)
        elif isinstance(op, WaitOp):
            run.next_at = t + op.seconds
        elif isinstance(op, UsageOp):
            run.acc.usage = op.usage
            run.next_at = t
        else:
            self._retry_or_fail(chat, run, op, t)

    def _retry_or_fail(self, chat: FakeChat, run: Run, op: RetryOp, t: float) -> None:
        config = self._store.config
        done = run.retries.get(op.index, 0)
        if done < op.times:
            run.retries[op.index] = done + 1
            delay = min(config.retry_base_delay * 2**done, config.retry_max_delay)
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
            state["retrying_at"] = self._store.timestamp(t + delay)
            self._store.begin(chat, t)
            chat.retry_state = state
            chat.retry_state_version = chat.snapshot_version
            run.phase = "start"
            run.next_at = t + delay
            return
        if op.fail is not None:
            self._finish_error(chat, t, op.fail)
            return
        run.next_at = t

    # -- ends of steps and turns ------------------------------------------------------------------

    def _commit_step(self, chat: FakeChat, run: Run, t: float) -> None:
        """CommitStep, then the next worker decision (server-behaviour 2.2, 3.4)."""
        store = self._store
        acc = run.acc
        store.begin(chat, t)
        if acc.content:
            spec = self._catalog.spec_by_id(run.model_config_id)
            store.insert(
                chat,
                t,
                "assistant",
                acc.content,
                model_config_id=run.model_config_id,
                usage=self._usage(chat, acc, spec),
            )
        for result in acc.results:
            store.insert(chat, t, "tool", [result])
        server_results = acc.server_results()
        if server_results:
            run.tool_results = server_results
        run.step_index += 1
        run.ops = None
        if acc.client_calls:
            # EnterRequiresAction: its own transaction (server-behaviour Q9).
            store.begin(chat, t)
            store.close_episode(chat)
            chat.status = STATUS_REQUIRES_ACTION
            chat.requires_action_deadline = t + store.config.requires_action_timeout
            run.phase = "paused"
            self._subscriptions.publish("action_required", chat, chat.action_calls())
        elif run.step_index < len(run.steps):
            run.phase = "start"
            run.next_at = t + self._delay(run)
        else:
            self._finish_turn(chat, t)

    def _next_turn_or_wait(self, chat: FakeChat, t: float) -> None:
        """R1 → the queue head is promoted and the status stays ``running`` with no terminal
        status in between (server-behaviour 8.2); R1P (the head under edit) → ``paused``,
        nothing promoted (server-behaviour 2.6, D35); R0 → ``waiting``."""
        if chat.queue and chat.queue[0].editing_since is not None:
            chat.status = STATUS_PAUSED
        elif chat.queue:
            self.start_run(chat, self._store.promote_head(chat, t), t)
            chat.status = STATUS_RUNNING
        else:
            chat.status = STATUS_WAITING
        self._subscriptions.publish("status_change", chat)

    def resume_paused(self, chat: FakeChat, t: float) -> None:
        """Leave ``paused`` (server-behaviour 2.6, D35): the head is sent and runs (R0 or R1),
        or, with the queue emptied, the chat is ``waiting``. In the caller's transaction."""
        if chat.queue:
            chat.queue[0].editing_since = None
            self.start_run(chat, self._store.promote_head(chat, t), t)
            chat.status = STATUS_RUNNING
        else:
            chat.status = STATUS_WAITING

    def _finish_turn(self, chat: FakeChat, t: float) -> None:
        """FinishTurn."""
        self.stop_run(chat)
        self._store.begin(chat, t)
        self._next_turn_or_wait(chat, t)

    def _finish_error(self, chat: FakeChat, t: float, fail: Fail) -> None:
        """FinishError: R0 → E0, R1 → E1, with ``last_error`` (server-behaviour 8.9)."""
        self.stop_run(chat)
        self._store.begin(chat, t)
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
        self._subscriptions.publish("status_change", chat)

    def _finish_interruption(self, chat: FakeChat, t: float) -> None:
        """FinishInterruption: commit the partial output, then I0 → W or I1 → promote the
        head and run (no intermediate ``waiting``; server-behaviour 2.2)."""
        run = self.runs.get(chat.id)
        chat.interrupt_at = None
        self._store.begin(chat, t)
        if run is not None and run.phase == "ops":
            partial = run.acc.partial()
            if partial:
                self._store.insert(
                    chat, t, "assistant", partial, model_config_id=run.model_config_id
                )
        self.stop_run(chat)
        self._next_turn_or_wait(chat, t)

    def _cancel_requires_action(self, chat: FakeChat, t: float) -> None:
        """CancelRequiresAction at the deadline: cancellation results, then the model
        continues (server-behaviour 2.2, 8.8)."""
        self._store.begin(chat, t)
        cancelled = self._store.cancel_pending(chat, t, CANCEL_BY_TIMEOUT)
        chat.status = STATUS_RUNNING
        self.resume_run(chat, t, [CANCEL_BY_TIMEOUT for _ in cancelled])
        self._subscriptions.publish("status_change", chat)
