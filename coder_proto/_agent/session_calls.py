"""A session's cleanup calls (state machines H.3-H.5; D4, D10, D11, D22):
``interrupt()``, ``archive()`` and disposal, as machines the session starts and an adapter
drives, with the results they return.

* ``SessionInterrupt`` targets the session's chat, else the last known one, closes a paused
  stream and posts the interrupt (``interrupt_chat``: D4's follow-up, D11's wait);
* ``SessionArchive`` archives the target and every stranded chat, stranded ones first, under
  one deadline (``archive_when_settled``: the 409 retry loop, D10);
* ``SessionDispose`` interrupts (unless the chat is known to be settled), then archives,
  bounded, collecting failures instead of raising (H.5).
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import TYPE_CHECKING, Any

import attrs

from .._constants import INTERRUPT_WAIT_TIMEOUT, SETTLED_STATUSES
from .._engine import CoreMachine, Wait
from .._errors import CoderAgentError, CoderApiError
from .._jobs.stopping import (
    MIN_ARCHIVE_BUDGET,
    archive_when_settled,
    interrupt_chat,
)
from .._wire.chats import Chat

if TYPE_CHECKING:
    from .session_state import SessionState

__all__ = [
    "ArchiveResult",
    "DisposeResult",
    "InterruptResult",
    "SessionArchive",
    "SessionDispose",
    "SessionInterrupt",
    "archive_session",
]

logger = logging.getLogger("coder_proto")


@attrs.frozen(kw_only=True)
class InterruptResult:
    """What ``interrupt()`` acted on (H.3): ``interrupted`` is ``False`` (and no request was
    made) when the session knows no chat, or, on closing (H.5), when its chat is known to be
    settled (``chat_id`` names it then). ``chat`` is the chat as the interrupt left it."""

    interrupted: bool
    chat_id: str | None = None
    chat: Chat | None = attrs.field(default=None, eq=False, repr=False)


@attrs.frozen(kw_only=True)
class ArchiveResult:
    """What ``archive()`` acted on (H.4): ``archived`` is ``False`` (and no request was made)
    when the session knows no chat; otherwise ``chat_id`` is the primary target and
    ``archived_chat_ids`` every chat archived, stranded ones first."""

    archived: bool
    chat_id: str | None = None
    archived_chat_ids: tuple[str, ...] = ()


@attrs.frozen(kw_only=True)
class DisposeResult:
    """What disposal did (H.5). Failures are collected, never raised."""

    interrupt: InterruptResult | None = None
    archive: ArchiveResult | None = None
    errors: tuple[BaseException, ...] = attrs.field(default=(), eq=False)


def _target(session: SessionState) -> str | None:
    return session.chat_id or session.last_known_chat_id


def _known_settled(session: SessionState) -> bool:
    """Whether the session's chat is known to run nothing: its last status (which belongs to
    ``session.chat_id``) is settled (D1) and no turn of the session is in flight."""
    return (
        session.chat_id is not None
        and session.last_status in SETTLED_STATUSES
        and session.in_flight is None
    )


class SessionInterrupt(CoreMachine[InterruptResult]):
    """``interrupt()`` (H.3, D4, D11): target the session's chat, else the last known one;
    close a paused stream (leave one a segment is reading); post the interrupt (its errors,
    such as a 409 on an idle chat, propagate; a chat ``paused`` at a queued message under
    edit is returned as it is, D35). With ``wait``, poll until the chat is settled
    within ``timeout`` seconds (builtin ``TimeoutError`` on expiry)."""

    def __init__(
        self,
        session: SessionState,
        *,
        now: float,
        wait: bool = False,
        timeout: float | None = None,
    ) -> None:
        super().__init__(session.selector)
        self._session = session
        self._wait_for_settle = wait
        self._timeout = INTERRUPT_WAIT_TIMEOUT if timeout is None else timeout
        self._start(now)

    def _run(self) -> Generator[None, None, InterruptResult]:
        return (
            yield from self._interrupt(self.now + self._timeout if self._wait_for_settle else None)
        )

    def _interrupt(self, deadline: float | None) -> Wait[InterruptResult]:
        session = self._session
        target = _target(session)
        if target is None:
            return InterruptResult(interrupted=False)
        for action in session.close_paused_stream(self.now):
            self._emit(action)
        chat = yield from interrupt_chat(
            self,
            target,
            last_status=session.last_status,
            wait=self._wait_for_settle,
            deadline=deadline,
            paused_ok=True,
        )
        session.last_status = chat.status
        return InterruptResult(interrupted=True, chat_id=target, chat=chat)


class SessionArchive(CoreMachine[ArchiveResult]):
    """``archive()`` (H.4, D10): archive every stranded chat (oldest first) and the primary
    target under one shared deadline of ``settle_deadline`` seconds, each with the 409 retry
    loop. Every target is attempted; an archived (or already archived) target leaves the
    cleanup ledger; a stranded target that answers 404 is dropped with a warning. The first
    failure is raised at the end, with the others attached as notes."""

    def __init__(self, session: SessionState, *, now: float) -> None:
        super().__init__(session.selector)
        self._session = session
        self._start(now)

    def _run(self) -> Generator[None, None, ArchiveResult]:
        return (
            yield from archive_session(
                self, self._session, self.now + self._session.config.settle_deadline
            )
        )


def archive_session(
    host: CoreMachine[Any], session: SessionState, deadline: float
) -> Wait[ArchiveResult]:
    """The body of ``SessionArchive`` (shared with disposal)."""
    primary = _target(session)
    if primary is None:
        return ArchiveResult(archived=False)
    for action in session.close_paused_stream(host.now):
        host._emit(action)
    targets = list(dict.fromkeys([*session.stranded_chat_ids, primary]))
    archived: list[str] = []
    failures: list[BaseException] = []
    retry_delay = session.config.settle_retry_delay
    for target in targets:
        budget = max(deadline - host.now, MIN_ARCHIVE_BUDGET)
        try:
            yield from archive_when_settled(host, target, budget=budget, retry_delay=retry_delay)
        except CoderApiError as exc:
            if exc.status == 404 and target != primary:
                logger.warning("stranded chat %s no longer exists; no longer archiving it", target)
                session.note_chat_cleaned_up(target)
                continue
            failures.append(exc)
            continue
        except (CoderAgentError, TimeoutError) as exc:
            failures.append(exc)
            continue
        session.note_chat_cleaned_up(target)
        archived.append(target)
    if failures:
        first = failures[0]
        for other in failures[1:]:
            first.add_note(f"archiving another chat also failed: {other}")
        raise first
    return ArchiveResult(archived=True, chat_id=primary, archived_chat_ids=tuple(archived))


class SessionDispose(CoreMachine[DisposeResult]):
    """Disposal (H.5): close the retained stream, interrupt unless the chat is known to be
    settled (an idle chat's 409 is fine), then archive, all under one deadline of
    ``settle_deadline`` seconds. Never raises: failures
    are collected in the result and logged."""

    def __init__(self, session: SessionState, *, now: float) -> None:
        super().__init__(session.selector)
        self._session = session
        self._start(now)

    def _run(self) -> Generator[None, None, DisposeResult]:
        session = self._session
        deadline = self.now + session.config.settle_deadline
        for action in session.close_retained_stream(self.now):
            self._emit(action)
        errors: list[BaseException] = []
        interrupt_result: InterruptResult | None = None
        archive_result: ArchiveResult | None = None
        target = _target(session)
        if target is None:
            interrupt_result = InterruptResult(interrupted=False)
        elif _known_settled(session):
            # H.5: nothing runs on a chat whose last status is settled (D1) while no turn is
            # in flight; interrupting it would only be answered 409.
            interrupt_result = InterruptResult(interrupted=False, chat_id=target)
        else:
            try:
                chat = yield from interrupt_chat(
                    self, target, last_status=session.last_status, deadline=deadline
                )
                session.last_status = chat.status
                interrupt_result = InterruptResult(interrupted=True, chat_id=target, chat=chat)
            except (CoderAgentError, TimeoutError) as exc:
                if not (isinstance(exc, CoderApiError) and exc.status == 409):
                    # A 409 is an idle chat, the usual case on a normal close: not logged.
                    logger.info("interrupt during disposal failed: %s", exc)
                errors.append(exc)
        try:
            archive_result = yield from archive_session(self, session, deadline)
        except (CoderAgentError, TimeoutError) as exc:
            logger.info("archive during disposal failed: %s", exc)
            errors.append(exc)
        return DisposeResult(
            interrupt=interrupt_result, archive=archive_result, errors=tuple(errors)
        )
