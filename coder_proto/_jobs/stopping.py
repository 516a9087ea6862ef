"""Stopping and retiring chats over REST: interrupt, withdrawal, archive (state machines
E.5, H.3-H.5; D4, D9, D10, D11, D22).

The procedures are generator coroutines run by any ``CoreMachine`` host, so the same code runs
inline in a turn (a foreground withdrawal after a timeout), as a fire-and-forget background job
(``InterruptJob``, ``WithdrawJob``; bounded at 10 s, D22), as the raw client's
``interrupt_chat`` (``ChatInterrupt``) or inside a session's cleanup calls
(``coder_proto._agent.session_calls``):

* ``interrupt_chat`` posts the interrupt and applies D4: when the answer says ``running``
  while the client last saw ``requires_action`` (the server resumed the run with cancelled
  tool results), it sends one follow-up interrupt. With ``wait`` it sends ``?wait=true`` and
  polls the chat every second until it is settled (D11), raising the builtin ``TimeoutError``
  at the deadline;
* ``withdraw_queued`` deletes a still-queued prompt and reports the D9 outcome: ``True`` on
  success, ``False`` on 404/409 (already promoted), ``None`` on any other failure;
* ``archive_when_settled`` archives one chat, retrying only 409 (the chat is winding down)
  every ``retry_delay`` until its budget runs out; "Chat is already archived." counts as
  success (D10).
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any, Final

from .._constants import (
    BACKGROUND_TASK_BOUND,
    INTERRUPT_POLL_INTERVAL,
    INTERRUPT_WAIT_TIMEOUT,
    SETTLED_STATUSES,
    STATUS_PAUSED,
    STATUS_REQUIRES_ACTION,
    STATUS_RUNNING,
)
from .._engine import CoreMachine, Wait
from .._errors import CoderAgentError, CoderApiError
from .._rest.prefix import PrefixSelector
from .._rest.routes import (
    ArchiveOutcome,
    build_archive_chat,
    build_delete_queued_message,
    build_get_chat,
    build_interrupt_chat,
    is_paused_refusal,
    parse_archive_chat,
    parse_delete_queued_message,
    parse_get_chat,
    parse_interrupt_chat,
)
from .._wire.chats import Chat

__all__ = [
    "ChatInterrupt",
    "InterruptJob",
    "WithdrawJob",
    "archive_when_settled",
    "interrupt_chat",
    "withdraw_queued",
]

logger = logging.getLogger("coder_proto")

#: The smallest per-target archive budget (H.4: ``max(deadline - now, 1 ms)``).
MIN_ARCHIVE_BUDGET: Final = 0.001


# -- procedures --------------------------------------------------------------------------------


def interrupt_chat(
    host: CoreMachine[Any],
    chat_id: str,
    *,
    last_status: str | None = None,
    wait: bool = False,
    deadline: float | None = None,
    poll_interval: float = INTERRUPT_POLL_INTERVAL,
    paused_ok: bool = False,
) -> Wait[Chat]:
    """Interrupt ``chat_id`` (wire 2) with D4's follow-up, and with ``wait`` poll until the
    chat is settled (D11). Errors of the first interrupt (a 409 on an idle chat...) propagate,
    except, with ``paused_ok``, on a ``paused`` chat (D35): nothing runs there, so its 409
    returns the chat as it is, read once (when ``last_status`` is unknown or ``paused``).
    Cleanup paths leave ``paused_ok`` off: an idle chat's 409 is fine for them as it is. A 409 on the follow-up means the run already stopped and is not an error.
    Past ``deadline`` the builtin ``TimeoutError`` is raised."""
    timeout_message = f"interrupting chat {chat_id} did not finish in time"
    try:
        chat = yield from host._rest(
            build_interrupt_chat(chat_id, wait=wait),
            parse_interrupt_chat,
            deadline=deadline,
            timeout_message=timeout_message,
        )
    except CoderApiError as exc:
        if exc.status != 409 or not paused_ok or last_status not in (None, STATUS_PAUSED):
            raise
        # D35: a paused chat is not interruptible, and needs no interrupt. Read it only when
        # the caller last saw it paused, or saw nothing.
        paused = yield from _read_paused(host, chat_id, deadline, timeout_message)
        if paused is None:
            raise
        return paused
    if chat.status == STATUS_RUNNING and last_status == STATUS_REQUIRES_ACTION:
        # D4: interrupting a paused chat inserted cancellation results and resumed the run.
        try:
            chat = yield from host._rest(
                build_interrupt_chat(chat_id, wait=wait),
                parse_interrupt_chat,
                deadline=deadline,
                timeout_message=timeout_message,
            )
        except CoderApiError as exc:
            if exc.status != 409:
                raise
    if not wait:
        return chat
    while chat.status not in SETTLED_STATUSES:
        if deadline is not None and host.now + poll_interval > deadline:
            raise TimeoutError(
                f"chat {chat_id} did not settle after the interrupt (status {chat.status!r})"
            )
        yield from host._sleep_until(host.now + poll_interval)
        chat = yield from host._rest(
            build_get_chat(chat_id),
            parse_get_chat,
            deadline=deadline,
            timeout_message=timeout_message,
        )
    return chat


def withdraw_queued(
    host: CoreMachine[Any], chat_id: str, queued_id: int, *, deadline: float | None = None
) -> Wait[bool | None]:
    """Delete our still-queued prompt (E.5) and report the D9 outcome: ``True`` after a 2xx,
    ``False`` after 404/409 (the prompt was already promoted and may run; a warning is
    logged), ``None`` after any other failure. Never raises a library error."""
    try:
        yield from host._rest(
            build_delete_queued_message(chat_id, queued_id),
            parse_delete_queued_message,
            deadline=deadline,
            timeout_message=f"withdrawing queued prompt {queued_id} did not finish in time",
        )
    except CoderApiError as exc:
        if exc.status in (404, 409):
            logger.warning(
                "the queued prompt %s of chat %s was already promoted or removed; it may run",
                queued_id,
                chat_id,
            )
            return False
        logger.info("withdrawing queued prompt %s of chat %s failed: %s", queued_id, chat_id, exc)
        return None
    except (CoderAgentError, TimeoutError) as exc:
        logger.info("withdrawing queued prompt %s of chat %s failed: %s", queued_id, chat_id, exc)
        return None
    return True


def _read_paused(
    host: CoreMachine[Any], chat_id: str, deadline: float | None, timeout_message: str
) -> Wait[Chat | None]:
    """The chat when one read says it is ``paused`` (D35), else ``None`` (any other status,
    or the read failed: the caller raises its own error then)."""
    try:
        chat = yield from host._rest(
            build_get_chat(chat_id),
            parse_get_chat,
            deadline=deadline,
            timeout_message=timeout_message,
        )
    except (CoderAgentError, TimeoutError):
        return None
    return chat if chat.status == STATUS_PAUSED else None


def archive_when_settled(
    host: CoreMachine[Any], chat_id: str, *, budget: float, retry_delay: float
) -> Wait[ArchiveOutcome]:
    """Archive ``chat_id`` (H.4 loop, D10): retry only a 409 every ``retry_delay`` while
    ``now + retry_delay`` stays within ``budget``, then raise the last 409. Any other error
    raises at once, and so does the 409 of a chat paused at a queued message under edit,
    which no wait ends (D35); a request still unanswered at the end of the budget raises the
    builtin ``TimeoutError``."""
    deadline = host.now + budget
    while True:
        try:
            return (
                yield from host._rest(
                    build_archive_chat(chat_id),
                    parse_archive_chat,
                    deadline=deadline,
                    timeout_message=f"archiving chat {chat_id} did not finish in time",
                )
            )
        except CoderApiError as exc:
            if exc.status != 409 or is_paused_refusal(exc) or host.now + retry_delay > deadline:
                raise
        yield from host._sleep_until(host.now + retry_delay)


# -- background jobs (D22) ---------------------------------------------------------------------


class InterruptJob(CoreMachine["Chat | None"]):
    """Fire-and-forget interrupt of a turn's chat (E.5, G.6) with D4's follow-up, bounded at
    ``bound`` seconds (10 s, D22). ``result()`` is the chat after the interrupt, or ``None``
    when it failed; failures are logged, never raised."""

    def __init__(
        self,
        selector: PrefixSelector,
        chat_id: str,
        *,
        now: float,
        last_status: str | None = None,
        bound: float = BACKGROUND_TASK_BOUND,
    ) -> None:
        super().__init__(selector)
        self.chat_id = chat_id
        self.last_status = last_status
        self._bound = bound
        self._start(now)

    def __repr__(self) -> str:
        return f"InterruptJob(chat_id={self.chat_id!r})"

    def _run(self) -> Generator[None, None, Chat | None]:
        try:
            return (
                yield from interrupt_chat(
                    self,
                    self.chat_id,
                    last_status=self.last_status,
                    deadline=self.now + self._bound,
                )
            )
        except (CoderAgentError, TimeoutError) as exc:
            logger.info("best-effort interrupt of chat %s failed: %s", self.chat_id, exc)
            return None


class WithdrawJob(CoreMachine["bool | None"]):
    """Fire-and-forget withdrawal of a still-queued prompt (E.5, D9), bounded at ``bound``
    seconds. ``result()`` is the D9 outcome; it never raises."""

    def __init__(
        self,
        selector: PrefixSelector,
        chat_id: str,
        queued_id: int,
        *,
        now: float,
        bound: float = BACKGROUND_TASK_BOUND,
    ) -> None:
        super().__init__(selector)
        self.chat_id = chat_id
        self.queued_id = queued_id
        self._bound = bound
        self._start(now)

    def __repr__(self) -> str:
        return f"WithdrawJob(chat_id={self.chat_id!r}, queued_id={self.queued_id})"

    def _run(self) -> Generator[None, None, bool | None]:
        return (
            yield from withdraw_queued(
                self, self.chat_id, self.queued_id, deadline=self.now + self._bound
            )
        )


class ChatInterrupt(CoreMachine[Chat]):
    """The raw client's ``interrupt_chat(chat_id, wait=...)`` (wire 2, D4, D11): the chat after
    the interrupt; with ``wait`` it polls every second until the chat is settled and raises the
    builtin ``TimeoutError`` after ``timeout`` seconds. Errors propagate. ``last_status`` is the
    status the caller last saw (``requires_action`` enables D4's follow-up)."""

    def __init__(
        self,
        selector: PrefixSelector,
        chat_id: str,
        *,
        now: float,
        wait: bool = False,
        timeout: float = INTERRUPT_WAIT_TIMEOUT,
        last_status: str | None = None,
    ) -> None:
        super().__init__(selector)
        self.chat_id = chat_id
        self._wait_for_settle = wait
        self._timeout = timeout
        self._last_status = last_status
        self._start(now)

    def _run(self) -> Generator[None, None, Chat]:
        return (
            yield from interrupt_chat(
                self,
                self.chat_id,
                last_status=self._last_status,
                wait=self._wait_for_settle,
                deadline=self.now + self._timeout if self._wait_for_settle else None,
                paused_ok=True,
            )
        )
