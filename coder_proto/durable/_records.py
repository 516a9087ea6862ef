"""The durable records: checkpoint, tool ledger entry, send journal entry, stranded chat
(docs/durable-workflows.md: "Shape each step", "Make client tools crash-safe", "Recover the
result before resubmitting"; D26).

Every record is a small frozen class that validates itself on construction and converts to
and from plain JSON (``to_json`` / ``from_json``), so any database can hold it: the SQLite
store keeps the JSON text, a user's store may keep columns. ``from_json`` raises
``DurableStoreError`` on anything malformed, never ``KeyError``/``TypeError``.

Keys. A checkpoint is keyed by ``(tenant, workflow_id)``; a ledger entry by ``(tenant,
chat_id, tool_call_id)`` (call ids are unique only within a chat, and one store may serve
several tenants: "Why the chat id (and tenant) belong in the key"); a journal entry by
``(tenant, chat_id)`` (one per chat, scoped per attempt by its marker and attempt count).
``idempotency_key`` builds the key handed to the external system from the same three parts.

Times. ``JournalEntry.at`` is wall-clock seconds since the epoch (it must mean the same thing
in the next process, so it cannot be monotonic); the adapter passes the wall clock in.
"""

from __future__ import annotations

import math
from typing import Any, Final, Literal, TypeAlias
from urllib.parse import quote

import attrs

from .._errors import CoderAgentError
from .._json import dumps
from .._rest.routes import check_unicode
from ._errors import DurableStoreError

__all__ = [
    "COMMITTING",
    "CUT_SHORT",
    "DEFAULT_TENANT",
    "DONE",
    "OUTCOME_ABORTED",
    "OUTCOME_FAILED",
    "OUTCOME_FINISHED",
    "OUTCOME_IN_FLIGHT",
    "RESUMED",
    "SUBMITTING",
    "Checkpoint",
    "JournalEntry",
    "JournalState",
    "LedgerEntry",
    "LedgerState",
    "StepOutcome",
    "StrandedChat",
    "check_key_part",
    "idempotency_key",
]

DEFAULT_TENANT: Final = "default"
"""The tenant used when none is given."""

# -- ledger states ("Make client tools crash-safe") --------------------------------------------

COMMITTING: Final[Literal["committing"]] = "committing"
"""Written before the effect: the call may or may not have committed its effect."""
DONE: Final[Literal["done"]] = "done"
"""Written after the effect, with the output the tool returned."""
LedgerState: TypeAlias = Literal["committing", "done"]
"""A tool ledger entry's state: ``committing`` or ``done``."""

# -- journal states ("Recover after a crash", the settle-wait) ---------------------------------

SUBMITTING: Final[Literal["submitting"]] = "submitting"
"""Written ahead of every send on a checkpointed chat."""
RESUMED: Final[Literal["resumed"]] = "resumed"
"""A recovery pass answered the pause with a complete result set and nothing was unstarted."""
CUT_SHORT: Final[Literal["cut-short"]] = "cut-short"
"""A recovery pass found an unstarted call and interrupts (D26)."""
JournalState: TypeAlias = Literal["submitting", "resumed", "cut-short"]
"""A send journal entry's state: ``submitting``, ``resumed`` or ``cut-short``."""

# -- how the last attempt of the checkpointed step ended ---------------------------------------

OUTCOME_IN_FLIGHT: Final[Literal["in_flight"]] = "in_flight"
"""A crash-safe tool claimed the chat before its effect; the turn had not ended (or the process
died).
"""
OUTCOME_FINISHED: Final[Literal["finished"]] = "finished"
"""The turn returned a result: the chat was left settled by it."""
OUTCOME_FAILED: Final[Literal["failed"]] = "failed"
"""The turn raised (a turn error, a stream loss on a resumed chat, an API error)."""
OUTCOME_ABORTED: Final[Literal["aborted"]] = "aborted"
"""The turn was cut by its own deadline or the caller's cancellation: an interrupt was fired, so a
later recovery must not trust its own 409 (pin ``cut_short``).
"""
StepOutcome: TypeAlias = Literal["in_flight", "finished", "failed", "aborted"]
"""How the last attempt of a checkpointed step ended."""

_LEDGER_STATES: Final = frozenset({COMMITTING, DONE})
_JOURNAL_STATES: Final = frozenset({SUBMITTING, RESUMED, CUT_SHORT})
_OUTCOMES: Final = frozenset({OUTCOME_IN_FLIGHT, OUTCOME_FINISHED, OUTCOME_FAILED, OUTCOME_ABORTED})


def check_key_part(value: object, name: str) -> str:
    """Return ``value`` when it is a non-blank string without control characters; otherwise
    raise ``CoderAgentError`` naming the argument. Key parts are tenants, workflow ids, chat
    ids and tool call ids."""
    if type(value) is not str or not value.strip():
        raise CoderAgentError(f"{name} must be a non-empty string, got {value!r}")
    if any(ord(c) < 32 or ord(c) == 127 for c in value):
        raise CoderAgentError(f"{name} must not contain control characters, got {value!r}")
    return check_unicode(value, name)


def idempotency_key(tenant: str, chat_id: str, tool_call_id: str) -> str:
    """The idempotency key of one client tool call: tenant, chat id and tool call id, each
    percent-encoded and joined with ``/`` (unambiguous whatever the parts contain). The server
    assigns the call id and commits it to history, so the key is the same in every process
    that ever runs the call ("Make client tools crash-safe")."""
    parts = (
        check_key_part(tenant, "tenant"),
        check_key_part(chat_id, "chat_id"),
        check_key_part(tool_call_id, "tool_call_id"),
    )
    return "/".join(quote(p, safe="") for p in parts)


def _json_ready(value: Any) -> bool:
    try:
        dumps(value)
    except (TypeError, ValueError, RecursionError):
        return False
    return True


def _record(obj: Any, what: str) -> dict[str, Any]:
    if type(obj) is not dict:
        raise DurableStoreError(f"malformed {what} record: expected a JSON object")
    return obj


def _field(obj: dict[str, Any], key: str, kinds: tuple[type, ...], what: str) -> Any:
    value = obj.get(key)
    if type(value) not in kinds:
        raise DurableStoreError(f"malformed {what} record: bad or missing {key!r}")
    return value


def _rebuilt(factory: Any, what: str, **kwargs: Any) -> Any:
    try:
        return factory(**kwargs)
    except CoderAgentError as exc:
        raise DurableStoreError(f"malformed {what} record: {exc.message}") from exc


def _check_cursor(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value <= 0:
        raise CoderAgentError(f"last_seen_message_id must be a positive integer, got {value!r}")
    return value


@attrs.frozen(kw_only=True)
class Checkpoint:
    """What a workflow carries between steps: its chat, and the resume cursor that pairs with
    it ("Shape each step": never the token, never the agent).

    ``step`` is the marker of the step that last ran on the chat and ``outcome`` how that
    attempt ended (``finished``, ``failed``, ``aborted``, or ``in_flight`` when a crash-safe
    tool claimed the chat mid-turn). They let the next step skip recovery when the store
    proves the chat was left settled, and pin ``cut_short`` after a deadline or cancellation
    ("Why a 409 cannot prove the attempt finished after a timeout"). ``steps`` lists the
    markers of every step that finished on the chat, oldest first: a step replayed after later
    steps ran is answered from history without touching the chat.
    """

    chat_id: str
    last_seen_message_id: int | None = None
    step: str | None = None
    outcome: StepOutcome = OUTCOME_FINISHED
    steps: tuple[str, ...] = ()

    def __attrs_post_init__(self) -> None:
        check_key_part(self.chat_id, "chat_id")
        _check_cursor(self.last_seen_message_id)
        if self.step is not None and (type(self.step) is not str or not self.step):
            raise CoderAgentError(f"step must be a non-empty string, got {self.step!r}")
        if self.outcome not in _OUTCOMES:
            raise CoderAgentError(f"unknown checkpoint outcome {self.outcome!r}")
        if not isinstance(self.steps, tuple) or not all(type(m) is str and m for m in self.steps):
            raise CoderAgentError("steps must be a tuple of non-empty step markers")

    def finishing(self, marker: str) -> tuple[str, ...]:
        """``steps`` with ``marker`` appended (once)."""
        return self.steps if marker in self.steps else (*self.steps, marker)

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"chat_id": self.chat_id, "outcome": self.outcome}
        if self.last_seen_message_id is not None:
            out["last_seen_message_id"] = self.last_seen_message_id
        if self.step is not None:
            out["step"] = self.step
        if self.steps:
            out["steps"] = list(self.steps)
        return out

    @classmethod
    def from_json(cls, obj: Any) -> Checkpoint:
        what = "checkpoint"
        obj = _record(obj, what)
        steps = _field(obj, "steps", (list, type(None)), what)
        return _rebuilt(  # type: ignore[no-any-return]
            cls,
            what,
            chat_id=_field(obj, "chat_id", (str,), what),
            last_seen_message_id=_field(obj, "last_seen_message_id", (int, type(None)), what),
            step=_field(obj, "step", (str, type(None)), what),
            outcome=obj.get("outcome", OUTCOME_FINISHED),
            steps=tuple(steps or ()),
        )


@attrs.frozen(kw_only=True)
class LedgerEntry:
    """One client tool call's verdict ("Make client tools crash-safe"): ``committing`` is
    written before the effect (no entry at all proves the effect never started), ``done``
    after it with the output the tool returned (JSON), which recovery submits instead of
    running the tool again."""

    state: LedgerState
    output: Any = None

    def __attrs_post_init__(self) -> None:
        if self.state not in _LEDGER_STATES:
            raise CoderAgentError(f"unknown ledger state {self.state!r}")
        if self.state == COMMITTING and self.output is not None:
            raise CoderAgentError("a committing ledger entry has no output")
        if not _json_ready(self.output):
            raise CoderAgentError("a ledger entry's output must be JSON")

    @classmethod
    def committing(cls) -> LedgerEntry:
        return cls(state=COMMITTING)

    @classmethod
    def done(cls, output: Any) -> LedgerEntry:
        return cls(state=DONE, output=output)

    def to_json(self) -> dict[str, Any]:
        if self.state == DONE:
            return {"state": DONE, "output": self.output}
        return {"state": COMMITTING}

    @classmethod
    def from_json(cls, obj: Any) -> LedgerEntry:
        what = "ledger"
        obj = _record(obj, what)
        state = _field(obj, "state", (str,), what)
        return _rebuilt(cls, what, state=state, output=obj.get("output"))  # type: ignore[no-any-return]


@attrs.frozen(kw_only=True)
class JournalEntry:
    """The per-attempt send journal ("A per-ATTEMPT journal"): ``state`` is ``submitting``
    (written ahead of every send on a checkpointed chat) or a recovery pass's verdict
    (``resumed`` / ``cut-short``, D26). ``marker`` and ``attempt`` (the step's committed
    attempts at write time) scope the entry: a consult applies it only while both still
    match. ``at`` is wall-clock epoch seconds (it bounds the in-flight-send wait)."""

    state: JournalState
    marker: str
    attempt: int
    at: float

    def __attrs_post_init__(self) -> None:
        if self.state not in _JOURNAL_STATES:
            raise CoderAgentError(f"unknown journal state {self.state!r}")
        if type(self.marker) is not str or not self.marker:
            raise CoderAgentError(f"marker must be a non-empty string, got {self.marker!r}")
        if type(self.attempt) is not int or self.attempt < 0:
            raise CoderAgentError(f"attempt must be a non-negative integer, got {self.attempt!r}")
        if (
            isinstance(self.at, bool)
            or not isinstance(self.at, int | float)
            or not math.isfinite(self.at)
        ):
            raise CoderAgentError(f"at must be a finite number of seconds, got {self.at!r}")

    def to_json(self) -> dict[str, Any]:
        return {"state": self.state, "marker": self.marker, "attempt": self.attempt, "at": self.at}

    @classmethod
    def from_json(cls, obj: Any) -> JournalEntry:
        what = "journal"
        obj = _record(obj, what)
        return _rebuilt(  # type: ignore[no-any-return]
            cls,
            what,
            state=_field(obj, "state", (str,), what),
            marker=_field(obj, "marker", (str,), what),
            attempt=_field(obj, "attempt", (int,), what),
            at=float(_field(obj, "at", (int, float), what)),
        )


@attrs.frozen(kw_only=True)
class StrandedChat:
    """A chat a failed turn discarded (a stream loss on a chat it had just created; C.5,
    "When the finally checkpoint writes nothing"): still live server-side, retired by
    ``archive_workflow`` or the orphan sweep."""

    tenant: str
    workflow_id: str
    chat_id: str

    def __attrs_post_init__(self) -> None:
        check_key_part(self.tenant, "tenant")
        check_key_part(self.workflow_id, "workflow_id")
        check_key_part(self.chat_id, "chat_id")
