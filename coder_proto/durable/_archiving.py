"""The workflow's end of life: archive at the end, and the orphan sweep
(docs/durable-workflows.md: "Archive at the end — and only at the end", "Recover after a crash";
D4, D10).

* ``ArchiveWorkflow`` retires a finished (or abandoned) workflow: its checkpointed chat and
  every stranded chat recorded for it. Each target is probed, interrupted when a run is live
  (D4's follow-up for a paused one; a 409 is fine), then archived with the 409 retry loop
  (D10), all under one deadline. Archived targets leave the store (checkpoint, ledger and
  journal entries, stranded records): an archived chat can never be resumed.
* ``OrphanSweep`` lists every chat the token sees (``GET {P}``, all pages) and retires every
  one no checkpoint in the store accounts for, whatever its status: an orphaned first turn may
  settle on its own and then sit live and unarchived forever, and a crash before the
  checkpoint leaves nothing else that names it. Every matching orphan is retired, not just the
  first. ``min_age`` keeps chats younger than that (by their ``created_at``) out of the sweep,
  for deployments where sweeps run while other workers are inside a first turn.
"""

from __future__ import annotations

import logging
from collections.abc import Generator
from typing import Any, Final

import attrs

from .._constants import (
    INTERRUPT_WAIT_TIMEOUT,
    SETTLE_DEADLINE,
    SETTLE_RETRY_DELAY,
    SETTLED_STATUSES,
)
from .._engine import Wait
from .._errors import CoderAgentError, CoderApiError
from .._jobs.stopping import MIN_ARCHIVE_BUDGET, archive_when_settled, interrupt_chat
from .._rest.prefix import PrefixSelector
from .._rest.routes import build_get_chat, build_list_chats, parse_get_chat, parse_list_chats
from .._timestamps import parse_rfc3339
from .._wire.chats import Chat
from ._errors import WorkflowBusyError
from ._records import Checkpoint, StrandedChat, check_key_part
from ._store import DEFAULT_LEASE_DURATION, Lease
from ._store_engine import DurableMachine

__all__ = [
    "ArchiveWorkflow",
    "ArchiveWorkflowResult",
    "OrphanSweep",
    "SweepResult",
    "parse_timestamp",
]

logger = logging.getLogger("coder_proto")

#: Chats per page of the sweep's listing.
SWEEP_PAGE_SIZE: Final = 100
#: A listing longer than this many pages is cut (a server repeating pages must not loop).
MAX_SWEEP_PAGES: Final = 10_000


def parse_timestamp(text: str) -> float | None:
    """Epoch seconds of an RFC 3339 timestamp (the server's ``created_at``; a space instead of
    the ``T`` is accepted too), or ``None`` when ``text`` is not one."""
    if isinstance(text, str) and text[10:11] == " ":
        text = text[:10] + "T" + text[11:]
    moment = parse_rfc3339(text)
    return None if moment is None else moment.timestamp()


def _retire(
    host: DurableMachine[Any],
    chat_id: str,
    *,
    status: str | None,
    archived: bool,
    deadline: float,
    retry_delay: float,
    interrupt_timeout: float,
) -> Wait[None]:
    """Stop a live run (D4's follow-up for a pause; a 409 means it already stopped), then
    archive with the 409 retry loop (D10). Errors of the archive propagate."""
    if archived:
        # Archiving again answers "already archived" (success, D10); an archived chat cannot
        # be interrupted.
        status = None
    elif status not in SETTLED_STATUSES:
        try:
            yield from interrupt_chat(
                host,
                chat_id,
                last_status=status,
                deadline=min(deadline, host.now + interrupt_timeout),
            )
        except CoderApiError as exc:
            if exc.status != 409:
                logger.info("interrupting chat %s before archiving failed: %s", chat_id, exc)
        except (CoderAgentError, TimeoutError) as exc:
            logger.info("interrupting chat %s before archiving failed: %s", chat_id, exc)
    budget = max(deadline - host.now, MIN_ARCHIVE_BUDGET)
    yield from archive_when_settled(host, chat_id, budget=budget, retry_delay=retry_delay)


@attrs.frozen(kw_only=True)
class ArchiveWorkflowResult:
    """What ``archive_workflow`` did: ``archived`` is ``False`` when the workflow had no chat
    at all (it died before its first turn created one); ``chat_id`` is the checkpointed chat;
    ``archived_chat_ids`` every chat archived, stranded ones first."""

    archived: bool
    chat_id: str | None = None
    archived_chat_ids: tuple[str, ...] = ()


class ArchiveWorkflow(DurableMachine[ArchiveWorkflowResult]):
    """Archive a workflow's chats and forget them (see the module docstring). Every target is
    attempted under one deadline of ``settle_deadline`` seconds; a stranded target that
    answers 404 is dropped; the first failure is raised at the end with the others attached
    as notes (D10), and failed targets stay in the store for a later attempt."""

    def __init__(
        self,
        selector: PrefixSelector,
        *,
        tenant: str,
        workflow_id: str,
        now: float,
        settle_deadline: float = SETTLE_DEADLINE,
        retry_delay: float = SETTLE_RETRY_DELAY,
        interrupt_timeout: float = INTERRUPT_WAIT_TIMEOUT,
    ) -> None:
        super().__init__(selector)
        self.tenant = check_key_part(tenant, "tenant")
        self.workflow_id = check_key_part(workflow_id, "workflow_id")
        self.settle_deadline = settle_deadline
        self.retry_delay = retry_delay
        self.interrupt_timeout = interrupt_timeout
        self._start(now)

    def __repr__(self) -> str:
        return f"ArchiveWorkflow(workflow_id={self.workflow_id!r}, done={self.done})"

    def _run(self) -> Generator[None, None, ArchiveWorkflowResult]:
        checkpoint: Checkpoint | None = yield from self._store(
            "get_checkpoint", self.tenant, self.workflow_id
        )
        records: tuple[StrandedChat, ...] = tuple(
            (yield from self._store("stranded_chats", self.tenant))
        )
        stranded = [r.chat_id for r in records if r.workflow_id == self.workflow_id]
        primary = checkpoint.chat_id if checkpoint is not None else None
        targets = list(dict.fromkeys([*stranded, *([primary] if primary else [])]))
        if not targets:
            return ArchiveWorkflowResult(archived=False)
        deadline = self.now + self.settle_deadline
        archived: list[str] = []
        failures: list[BaseException] = []
        for target in targets:
            is_primary = target == primary
            try:
                chat: Chat = yield from self._rest(
                    build_get_chat(target),
                    parse_get_chat,
                    deadline=max(deadline, self.now + MIN_ARCHIVE_BUDGET),
                    timeout_message=f"reading chat {target} timed out",
                )
                yield from _retire(
                    self,
                    target,
                    status=chat.status,
                    archived=chat.archived,
                    deadline=deadline,
                    retry_delay=self.retry_delay,
                    interrupt_timeout=self.interrupt_timeout,
                )
            except CoderApiError as exc:
                if exc.status == 404 and not is_primary:
                    logger.warning(
                        "stranded chat %s no longer exists; no longer archiving it", target
                    )
                    yield from self._store("remove_stranded", self.tenant, target)
                    continue
                failures.append(exc)
                continue
            except (CoderAgentError, TimeoutError) as exc:
                failures.append(exc)
                continue
            archived.append(target)
            yield from self._store("forget_chat", self.tenant, target)
            if is_primary:
                yield from self._store("delete_checkpoint", self.tenant, self.workflow_id)
            if target in stranded:
                yield from self._store("remove_stranded", self.tenant, target)
        if failures:
            first = failures[0]
            for other in failures[1:]:
                first.add_note(f"archiving another chat also failed: {other}")
            raise first
        return ArchiveWorkflowResult(
            archived=True, chat_id=primary, archived_chat_ids=tuple(archived)
        )


@attrs.frozen(kw_only=True)
class SweepResult:
    """What the sweep did: ``archived_chat_ids`` were retired; ``failed`` pairs a chat id
    with the error that kept it live (it is retried by the next sweep); ``skipped_chat_ids``
    are orphans kept because they are younger than ``min_age`` (or their age is unknown);
    ``accounted`` counts the chats a checkpoint accounts for."""

    archived_chat_ids: tuple[str, ...] = ()
    failed: tuple[tuple[str, BaseException], ...] = attrs.field(default=(), eq=False)
    skipped_chat_ids: tuple[str, ...] = ()
    accounted: int = 0


class OrphanSweep(DurableMachine[SweepResult]):
    """Retire every chat no checkpoint accounts for (see the module docstring). ``wall`` is
    the wall clock at ``now`` (for ``min_age`` and leases). Each orphan gets its own
    ``settle_deadline`` for the interrupt and the archive loop; a failure is reported in the
    result and the sweep goes on. A failed listing raises.

    With ``lease_owner`` (D27), an orphan recorded as a workflow's stranded chat is retired
    only under that workflow's lease: while another worker holds it, the chat is left for the
    next sweep and reported in ``failed`` with a ``WorkflowBusyError``."""

    def __init__(
        self,
        selector: PrefixSelector,
        *,
        now: float,
        wall: float,
        min_age: float = 0.0,
        settle_deadline: float = SETTLE_DEADLINE,
        retry_delay: float = SETTLE_RETRY_DELAY,
        interrupt_timeout: float = INTERRUPT_WAIT_TIMEOUT,
        page_size: int = SWEEP_PAGE_SIZE,
        lease_owner: str | None = None,
        lease_duration: float = DEFAULT_LEASE_DURATION,
    ) -> None:
        super().__init__(selector)
        if lease_owner is not None:
            check_key_part(lease_owner, "owner")
        self.lease_owner = lease_owner
        # One retire is bounded (its interrupt, then its archive loop): the lease on a
        # stranded chat's workflow outlives it without renewal.
        self.lease_duration = max(
            float(lease_duration), settle_deadline + interrupt_timeout + MIN_ARCHIVE_BUDGET
        )
        if isinstance(min_age, bool) or not isinstance(min_age, int | float) or not min_age >= 0:
            raise CoderAgentError(
                f"min_age must be a non-negative number of seconds, got {min_age!r}"
            )
        self.min_age = float(min_age)
        self.settle_deadline = settle_deadline
        self.retry_delay = retry_delay
        self.interrupt_timeout = interrupt_timeout
        self.page_size = page_size
        self._wall_offset = float(wall) - float(now)
        self._start(now)

    def __repr__(self) -> str:
        return f"OrphanSweep(min_age={self.min_age:g}, done={self.done})"

    def _list(self) -> Wait[list[Chat]]:
        chats: dict[str, Chat] = {}
        offset = 0
        # A server listing new chats forever is cut after MAX_SWEEP_PAGES pages.
        for _ in range(MAX_SWEEP_PAGES):  # pragma: no branch
            page = yield from self._rest(
                build_list_chats(limit=self.page_size, offset=offset), parse_list_chats
            )
            fresh = [c for c in page if c.id not in chats]
            for chat in fresh:
                chats[chat.id] = chat
            if len(page) < self.page_size or not fresh:
                break
            offset += len(page)
        return list(chats.values())

    def _old_enough(self, chat: Chat) -> bool:
        if self.min_age <= 0:
            return True
        created = parse_timestamp(chat.created_at)
        if created is None:
            return False
        return (self.now + self._wall_offset) - created >= self.min_age

    def _run(self) -> Generator[None, None, SweepResult]:
        chats = yield from self._list()
        # Read after listing: a chat listed was created before this read, so a checkpoint
        # written for it meanwhile is seen.
        accounted: frozenset[str] = frozenset(
            (yield from self._store("checkpointed_chat_ids", None))
        )
        records: tuple[StrandedChat, ...] = tuple((yield from self._store("stranded_chats", None)))
        archived: list[str] = []
        failed: list[tuple[str, BaseException]] = []
        skipped: list[str] = []
        for chat in chats:
            if chat.id in accounted or chat.archived or chat.parent_chat_id is not None:
                continue
            if not self._old_enough(chat):
                skipped.append(chat.id)
                continue
            owners = [r for r in records if r.chat_id == chat.id]
            held: list[StrandedChat] = []
            busy: WorkflowBusyError | None = None
            if self.lease_owner is not None:
                # D27: a stranded chat belongs to a workflow; act on it only under its lease.
                for record in owners:
                    lease: Lease = yield from self._store(
                        "acquire_lease",
                        record.tenant,
                        record.workflow_id,
                        self.lease_owner,
                        self.now + self._wall_offset,
                        self.lease_duration,
                    )
                    if not lease.held_by(self.lease_owner):
                        busy = WorkflowBusyError(
                            tenant=record.tenant,
                            workflow_id=record.workflow_id,
                            owner=lease.owner,
                            expires_at=lease.expires_at,
                            chat_id=chat.id,
                        )
                        break
                    held.append(record)
            if busy is None:
                yield from self._retire_orphan(chat, records, archived, failed)
            else:
                logger.info("the sweep leaves stranded chat %s: %s", chat.id, busy)
                failed.append((chat.id, busy))
            # (A store failure above ends the sweep; the leases then expire on their own.)
            for record in held:
                yield from self._store(
                    "release_lease", record.tenant, record.workflow_id, self.lease_owner
                )
        return SweepResult(
            archived_chat_ids=tuple(archived),
            failed=tuple(failed),
            skipped_chat_ids=tuple(skipped),
            accounted=sum(1 for c in chats if c.id in accounted),
        )

    def _retire_orphan(
        self,
        chat: Chat,
        records: tuple[StrandedChat, ...],
        archived: list[str],
        failed: list[tuple[str, BaseException]],
    ) -> Generator[None, None, None]:
        """Retire one orphan (its failure is recorded in ``failed``)."""
        try:
            yield from _retire(
                self,
                chat.id,
                status=chat.status,
                archived=False,
                deadline=self.now + self.settle_deadline,
                retry_delay=self.retry_delay,
                interrupt_timeout=self.interrupt_timeout,
            )
        except (CoderAgentError, TimeoutError) as exc:
            logger.warning("the sweep could not archive orphan chat %s: %s", chat.id, exc)
            failed.append((chat.id, exc))
            return
        logger.info("the sweep archived orphan chat %s (status %s)", chat.id, chat.status)
        archived.append(chat.id)
        for record in records:
            if record.chat_id == chat.id:
                yield from self._store("remove_stranded", record.tenant, record.chat_id)
