"""Queued-prompt tracking: the gate of a queued turn and the teardown decision
(state machines E.1-E.5; D3, D8, D9).

A send to a busy chat is queued (E.1): the turn dials from the pre-turn cursor and must not
attribute anything of the concurrent run to itself until its own prompt materialises as a user
message. ``QueuedGate`` decides when that happens (the *anchor*):

* a user message stamped with ``queued_message_id`` anchors iff the stamp is our queue entry's
  id; a stamp for another entry is never a candidate (E.3, D8);
* an unstamped user message whose content matches ours (canonical JSON, D18) becomes the
  candidate, confirmed by a ``queue_update`` that no longer lists our entry; FIFO order
  resolves identical prompts (E.2);
* our entry vanishing with no candidate, or an ``error`` while gated, is a dead end
  (``CoderChatError(kind="queued_submission_lost")``).

``teardown_action`` is the E.5 decision between withdrawing the queued prompt and interrupting
the chat when a turn ends unsettled.
"""

from __future__ import annotations

from typing import Any, Final, Literal, TypeAlias

import attrs

from .._errors import CoderChatError, CoderProtocolError
from .._json import canonical_json
from .._wire.events import ErrorEvent, MessageEvent, QueueUpdateEvent, StreamEvent
from .._wire.messages import ChatError, ChatMessage, ChatQueuedMessage

__all__ = [
    "QUEUED_SUBMISSION_LOST",
    "GateAnchored",
    "GateDeadEnd",
    "GateOutcome",
    "QueuedGate",
    "QueuedSubmission",
    "TeardownAction",
    "queued_submission_lost",
    "teardown_action",
]

#: The ``kind`` of the error a queued turn raises when its prompt can no longer run (E.2).
QUEUED_SUBMISSION_LOST: Final = "queued_submission_lost"

_LEFT_QUEUE_MESSAGE: Final = (
    "This turn's queued submission left the chat's queue without materializing as a message "
    "(it was deleted, or the chat's history changed)"
)
_RUN_FAILED_MESSAGE: Final = (
    "The chat's active run failed while this turn's submission was queued; the server does "
    "not promote queued prompts after an error"
)

TeardownAction: TypeAlias = Literal["withdraw", "interrupt", "none"]


@attrs.frozen
class QueuedSubmission:
    """What the send response told us about our queued prompt (E.1).

    ``queued_id`` is the queue entry's id (its own id space, not a message id), ``content``
    the entry's wire content list. Either may be ``None`` when the response lacked it;
    ``content`` ``None`` matches any user message, while a list (even empty) must match
    exactly (D8).
    """

    queued_id: int | None = None
    content: list[Any] | None = attrs.field(default=None, hash=False)

    @classmethod
    def from_entry(cls, entry: ChatQueuedMessage | None) -> QueuedSubmission:
        """From the send response's ``queued_message`` (``None`` when it had none)."""
        if entry is None:
            return cls()
        content = entry.raw_content
        if content is None and entry.content is not None:
            content = [part.to_json() for part in entry.content]
        return cls(entry.id, content)


@attrs.frozen
class GateAnchored:
    """The gate came down: the turn's window starts after ``anchor_id`` and the buffered
    messages in ``replay`` go through the normal snapshot path (E.2 Anchor)."""

    anchor_id: int
    replay: tuple[ChatMessage, ...] = ()


@attrs.frozen
class GateDeadEnd:
    """The queued prompt can no longer run on this stream (E.2 dead end)."""

    error: CoderChatError


GateOutcome: TypeAlias = GateAnchored | GateDeadEnd


def queued_submission_lost(
    message: str, *, detail: str | None = None, chat_id: str | None = None
) -> CoderChatError:
    """The ``queued_submission_lost`` error (E.2): not retryable."""
    return CoderChatError(
        message, detail=detail, kind=QUEUED_SUBMISSION_LOST, retryable=False, chat_id=chat_id
    )


def _canonical(value: Any) -> str:
    try:
        return canonical_json(value)
    except (RecursionError, TypeError, ValueError) as exc:
        raise CoderProtocolError("queued prompt content cannot be compared as JSON") from exc


def _message_content(message: ChatMessage) -> list[Any]:
    """The wire content list of a message (``[]`` when absent or null, E.2 step 3)."""
    if message.raw:
        content = message.raw.get("content")
        return content if type(content) is list else []
    return [part.to_json() for part in message.content]


class QueuedGate:
    """The queued-submission gate of one segment (E.2 with E.3/D8 on top).

    Feed it every stream event while it is up; it returns ``None`` (the event is withheld),
    ``GateAnchored`` once, or ``GateDeadEnd`` once. After either outcome it is finished and
    ignores further events. Messages with id <= ``turn_cursor`` (the pre-turn cursor) are
    ignored outright.
    """

    __slots__ = (
        "_buffered",
        "_candidate_id",
        "_chat_id",
        "_expected",
        "_outcome",
        "_queued_id",
        "_turn_cursor",
    )

    def __init__(
        self, submission: QueuedSubmission, *, turn_cursor: int, chat_id: str | None = None
    ) -> None:
        self._queued_id = submission.queued_id
        # D8: content is "present" whenever it is a list, even an empty one.
        content = submission.content
        self._expected = _canonical(content) if type(content) is list else None
        self._turn_cursor = turn_cursor
        self._chat_id = chat_id
        self._candidate_id: int | None = None
        self._buffered: list[ChatMessage] = []
        self._outcome: GateOutcome | None = None

    @property
    def candidate_id(self) -> int | None:
        """The user message currently taken for ours, awaiting ``queue_update``."""
        return self._candidate_id

    @property
    def buffered(self) -> tuple[ChatMessage, ...]:
        """Messages seen after the candidate, replayed if it anchors."""
        return tuple(self._buffered)

    @property
    def outcome(self) -> GateOutcome | None:
        """The anchor or dead end, once reached."""
        return self._outcome

    @property
    def up(self) -> bool:
        """True until the gate anchored (a dead end keeps it up: nothing is ours)."""
        return not isinstance(self._outcome, GateAnchored)

    def feed(self, event: StreamEvent) -> GateOutcome | None:
        """Apply one event (E.2 table). Everything but ``message``, ``queue_update`` and
        ``error`` is withheld: it belongs to the concurrent run."""
        if self._outcome is not None:
            return None
        if type(event) is MessageEvent:
            return self._on_message(event.message)
        if type(event) is QueueUpdateEvent:
            return self._on_queue_update(event.queued_messages)
        if type(event) is ErrorEvent and event.error is not None:
            return self._on_error(event.error)
        return None

    def _on_message(self, message: ChatMessage) -> GateOutcome | None:
        if message.id <= self._turn_cursor:
            return None
        if message.role == "user":
            stamp = message.queued_message_id
            if stamp is not None and self._queued_id is not None:
                # E.3/D8: a stamp decides exactly; another entry's prompt is no candidate.
                if stamp == self._queued_id:
                    return self._anchor(message.id)
            elif self._expected is None or (
                _canonical(_message_content(message)) == self._expected
            ):
                if self._queued_id is None:
                    # Nothing to confirm against: the first match is ours (E.2 step 3).
                    return self._anchor(message.id)
                # The latest match wins; what came after an earlier match was not ours.
                self._candidate_id = message.id
                self._buffered = []
                return None
        if self._candidate_id is not None:
            self._buffered.append(message)
        return None

    def _on_queue_update(self, queue: tuple[ChatQueuedMessage, ...]) -> GateOutcome | None:
        if self._queued_id is None:
            return None
        if any(entry.id == self._queued_id for entry in queue):
            # Our entry is still queued: the candidate was an earlier identical prompt.
            self._candidate_id = None
            self._buffered = []
            return None
        if self._candidate_id is not None:
            return self._anchor(self._candidate_id)
        return self._dead(queued_submission_lost(_LEFT_QUEUE_MESSAGE, chat_id=self._chat_id))

    def _on_error(self, error: ChatError) -> GateOutcome:
        # The server does not promote the queue after an error: our prompt will not run.
        detail = f"{error.message}: {error.detail}" if error.detail else error.message
        return self._dead(
            queued_submission_lost(_RUN_FAILED_MESSAGE, detail=detail, chat_id=self._chat_id)
        )

    def _anchor(self, anchor_id: int) -> GateAnchored:
        outcome = GateAnchored(anchor_id, tuple(self._buffered))
        self._candidate_id = None
        self._buffered = []
        self._outcome = outcome
        return outcome

    def _dead(self, error: CoderChatError) -> GateDeadEnd:
        outcome = GateDeadEnd(error)
        self._candidate_id = None
        self._buffered = []
        self._outcome = outcome
        return outcome


def teardown_action(
    *,
    queued_turn: bool,
    gate_up: bool | None,
    queued_entry_id: int | None,
    chat_id: str | None,
) -> TeardownAction:
    """What an unsettled segment does to the server when it ends (E.5, D9).

    ``gate_up`` is ``None`` when no translator was built yet. A queued turn whose gate is
    still up (or was never built) withdraws its queue entry when its id is known, and never
    interrupts: the running chat belongs to someone else (D9). Any other turn interrupts its
    own chat. ``"none"`` when the needed id is unknown.
    """
    if queued_turn and (gate_up is None or gate_up):
        if queued_entry_id is not None and chat_id is not None:
            return "withdraw"
        return "none"
    if chat_id is not None:
        return "interrupt"
    return "none"
