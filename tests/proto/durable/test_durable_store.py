"""The durable records and store calls: validation, JSON round trips, store operations and
the store check (docs/durable-workflows.md: "Shape each step", "Make client tools crash-safe",
the send journal). The stores themselves are tested in ``tests/stores``."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto._errors import CoderAgentError
from coder_proto.durable import (
    COMMITTING,
    DONE,
    OUTCOME_ABORTED,
    Checkpoint,
    DurableStoreError,
    JournalEntry,
    LedgerEntry,
    MemoryStore,
    idempotency_key,
)
from coder_proto.durable._store import StoreCall, StoreOp

# -- records ------------------------------------------------------------------------------------


def test_checkpoint_holds_the_chat_and_cursor_never_a_token() -> None:
    cp = Checkpoint(chat_id="c1", last_seen_message_id=42, step="[wf/s]", steps=("[wf/s]",))
    assert cp.to_json() == {
        "chat_id": "c1",
        "outcome": "finished",
        "last_seen_message_id": 42,
        "step": "[wf/s]",
        "steps": ["[wf/s]"],
    }
    assert Checkpoint.from_json(cp.to_json()) == cp
    assert cp.finishing("[wf/s]") == ("[wf/s]",)
    assert cp.finishing("[wf/t]") == ("[wf/s]", "[wf/t]")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"chat_id": ""}, "chat_id"),
        ({"chat_id": "c\n"}, "control"),
        ({"chat_id": "c", "last_seen_message_id": 0}, "positive"),
        ({"chat_id": "c", "last_seen_message_id": True}, "positive"),
        ({"chat_id": "c", "step": ""}, "step"),
        ({"chat_id": "c", "outcome": "weird"}, "outcome"),
        ({"chat_id": "c", "steps": ["x"]}, "steps"),
        ({"chat_id": "c", "steps": ("",)}, "steps"),
    ],
)
def test_bad_checkpoints_are_typed_errors(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(CoderAgentError, match=match):
        Checkpoint(**kwargs)


def test_ledger_entries() -> None:
    assert LedgerEntry.committing().to_json() == {"state": COMMITTING}
    done = LedgerEntry.done({"receipt": "r"})
    assert done.to_json() == {"state": DONE, "output": {"receipt": "r"}}
    assert LedgerEntry.from_json(done.to_json()) == done
    with pytest.raises(CoderAgentError, match="state"):
        LedgerEntry(state="started")  # type: ignore[arg-type]
    with pytest.raises(CoderAgentError, match="no output"):
        LedgerEntry(state="committing", output="x")
    with pytest.raises(CoderAgentError, match="JSON"):
        LedgerEntry(state="done", output=object())


def test_journal_entries() -> None:
    entry = JournalEntry(state="submitting", marker="[wf/s]", attempt=0, at=1.5)
    assert JournalEntry.from_json(entry.to_json()) == entry
    for kwargs, match in (
        ({"state": "sent"}, "state"),
        ({"marker": ""}, "marker"),
        ({"attempt": -1}, "attempt"),
        ({"attempt": 1.0}, "attempt"),
        ({"at": float("inf")}, "finite"),
        ({"at": True}, "finite"),
    ):
        base: dict[str, Any] = {"state": "resumed", "marker": "m", "attempt": 1, "at": 0.0}
        base.update(kwargs)
        with pytest.raises(CoderAgentError, match=match):
            JournalEntry(**base)


@pytest.mark.parametrize(
    ("cls", "obj"),
    [
        (Checkpoint, None),
        (Checkpoint, []),
        (Checkpoint, {"chat_id": 3}),
        (Checkpoint, {"chat_id": "c", "outcome": "nope"}),
        (Checkpoint, {"chat_id": "c", "steps": "x"}),
        (LedgerEntry, {"state": 1}),
        (LedgerEntry, {"state": "committing", "output": "x"}),
        (JournalEntry, {"state": "resumed", "marker": "m", "attempt": "1", "at": 0}),
        (JournalEntry, {"state": "resumed", "marker": "m", "attempt": 1}),
    ],
)
def test_malformed_records_raise_durable_store_error(cls: Any, obj: Any) -> None:
    with pytest.raises(DurableStoreError, match="malformed"):
        cls.from_json(obj)


def test_idempotency_keys_fold_in_tenant_chat_and_call_unambiguously() -> None:
    """Call ids are unique only within a chat, and a store may serve several tenants."""
    assert idempotency_key("acme", "chat-1", "call-1") == "acme/chat-1/call-1"
    assert idempotency_key("a/b", "c", "d") != idempotency_key("a", "b/c", "d")
    assert idempotency_key("t", "chat 1", "x") == "t/chat%201/x"
    with pytest.raises(CoderAgentError, match="tool_call_id"):
        idempotency_key("t", "c", "")
    # A server-assigned call id that is not valid Unicode cannot be stored or keyed.
    with pytest.raises(CoderAgentError, match="tool_call_id must be valid Unicode text"):
        idempotency_key("t", "c", "call-\ud800")


text = st.text(st.characters(blacklist_categories=("Cs", "Cc")), min_size=1)
json_value = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(), inner, max_size=3),
    max_leaves=10,
)


@settings(max_examples=200, deadline=None)
@given(
    chat=text.filter(lambda s: s.strip() != ""),
    cursor=st.none() | st.integers(min_value=1),
    step=st.none() | text,
    steps=st.lists(text, max_size=4),
    output=json_value,
    attempt=st.integers(min_value=0, max_value=10**6),
    at=st.floats(allow_nan=False, allow_infinity=False),
)
def test_records_round_trip_through_json(
    chat: str,
    cursor: int | None,
    step: str | None,
    steps: list[str],
    output: Any,
    attempt: int,
    at: float,
) -> None:
    """Whatever a store keeps as JSON comes back as the same record."""
    cp = Checkpoint(
        chat_id=chat,
        last_seen_message_id=cursor,
        step=step,
        outcome=OUTCOME_ABORTED,
        steps=tuple(steps),
    )
    assert Checkpoint.from_json(cp.to_json()) == cp
    done = LedgerEntry.done(output)
    assert LedgerEntry.from_json(done.to_json()) == done
    entry = JournalEntry(state="cut-short", marker=chat, attempt=attempt, at=at)
    assert JournalEntry.from_json(entry.to_json()) == entry


def test_store_ops_check_their_values() -> None:
    op = StoreOp("get_ledger", ("t", "c", "x"))
    assert op.check(None) is None
    assert not op.is_write and StoreOp("put_journal").is_write
    with pytest.raises(CoderAgentError, match="returned int"):
        op.check(3)
    with pytest.raises(CoderAgentError, match="unknown store method"):
        StoreOp("drop_everything")
    call = StoreCall(call_id=1, op=op)
    assert call.op.apply(MemoryStore()) is None


def test_check_store_names_what_is_missing() -> None:
    from coder_proto.durable import check_store

    check_store(MemoryStore())
    with pytest.raises(CoderAgentError, match="lacks get_checkpoint"):
        check_store(object())
