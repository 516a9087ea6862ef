"""The durable records and stores: validation, JSON round trips, the store protocol on the
in-memory and SQLite stores alike, and SQLite across processes (docs/durable-workflows.md:
"Shape each step", "Make client tools crash-safe", the send journal)."""

from __future__ import annotations

import multiprocessing
import pathlib
import sqlite3
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_io_sync.durable_sqlite import SQLiteStore
from coder_proto import CoderAgentError
from coder_proto.durable import (
    COMMITTING,
    DONE,
    OUTCOME_ABORTED,
    Checkpoint,
    DurableStore,
    DurableStoreError,
    JournalEntry,
    LedgerEntry,
    MemoryStore,
    StrandedChat,
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


# -- the protocol, on both stores -----------------------------------------------------------------


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[Any]:
    if request.param == "memory":
        yield MemoryStore()
    else:
        with SQLiteStore(tmp_path / "durable.sqlite3") as sqlite_store:
            yield sqlite_store


def test_outputs_that_are_not_valid_unicode_are_stored_and_read_back(store: Any) -> None:
    """A tool's output can hold a lone surrogate (a model's arguments echoed back, bytes read
    with ``surrogateescape``): the store keeps it exactly, never a ``UnicodeEncodeError``."""
    output = {"text": "half a pair: \ud800", "ok": "é✓"}
    store.put_ledger("t", "c", "call-1", LedgerEntry.done(output))
    assert store.get_ledger("t", "c", "call-1") == LedgerEntry.done(output)


def test_store_protocol(store: Any) -> None:
    assert isinstance(store, DurableStore)
    assert "Store(" in repr(store)
    assert store.get_checkpoint("t", "wf") is None
    cp = Checkpoint(chat_id="c1", last_seen_message_id=3, step="[wf/a]")
    store.put_checkpoint("t", "wf", cp)
    store.put_checkpoint("u", "wf", Checkpoint(chat_id="c2"))
    assert store.get_checkpoint("t", "wf") == cp
    assert store.checkpointed_chat_ids("t") == frozenset({"c1"})
    assert store.checkpointed_chat_ids() == frozenset({"c1", "c2"})
    store.put_checkpoint("t", "wf", Checkpoint(chat_id="c3"))
    assert store.checkpointed_chat_ids("t") == frozenset({"c3"})
    store.delete_checkpoint("t", "wf")
    assert store.get_checkpoint("t", "wf") is None

    store.put_ledger("t", "c1", "call-1", LedgerEntry.committing())
    store.put_ledger("t", "c1", "call-1", LedgerEntry.done("ok"))
    store.put_ledger("u", "c1", "call-1", LedgerEntry.committing())
    assert store.get_ledger("t", "c1", "call-1") == LedgerEntry.done("ok")
    assert store.get_ledger("u", "c1", "call-1") == LedgerEntry.committing()
    assert store.get_ledger("t", "c2", "call-1") is None

    entry = JournalEntry(state="submitting", marker="m", attempt=0, at=1.0)
    store.put_journal("t", "c1", entry)
    assert store.get_journal("t", "c1") == entry
    assert store.get_journal("u", "c1") is None

    store.add_stranded("t", "wf", "s1")
    store.add_stranded("t", "wf", "s2")
    store.add_stranded("t", "wf", "s1")
    store.add_stranded("u", "wf", "s3")
    assert [s.chat_id for s in store.stranded_chats("t")] == ["s1", "s2"]
    assert len(store.stranded_chats()) == 3
    assert store.stranded_chats("t")[0] == StrandedChat(tenant="t", workflow_id="wf", chat_id="s1")
    store.remove_stranded("t", "s1")
    assert [s.chat_id for s in store.stranded_chats("t")] == ["s2"]

    store.forget_chat("t", "c1")
    assert store.get_ledger("t", "c1", "call-1") is None
    assert store.get_journal("t", "c1") is None
    assert store.get_ledger("u", "c1", "call-1") is not None


@pytest.mark.parametrize(
    ("method", "args", "match"),
    [
        ("put_checkpoint", ("", "wf", Checkpoint(chat_id="c")), "tenant"),
        ("put_checkpoint", ("t", "", Checkpoint(chat_id="c")), "workflow_id"),
        ("put_checkpoint", ("t", "wf", {"chat_id": "c"}), "Checkpoint"),
        ("put_ledger", ("t", "c", "", LedgerEntry.committing()), "tool_call_id"),
        ("put_ledger", ("t", "c", "x", "done"), "LedgerEntry"),
        ("put_journal", ("t", "", None), "chat_id"),
        ("put_journal", ("t", "c", None), "JournalEntry"),
        ("add_stranded", ("t", "wf", ""), "chat_id"),
    ],
)
def test_store_writes_validate(store: Any, method: str, args: tuple[Any, ...], match: str) -> None:
    with pytest.raises(CoderAgentError, match=match):
        getattr(store, method)(*args)


# -- SQLite specifics -----------------------------------------------------------------------------


def test_sqlite_uses_wal_and_survives_reopening(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.sqlite3"
    with SQLiteStore(path) as store:
        store.put_checkpoint("t", "wf", Checkpoint(chat_id="c", last_seen_message_id=9))
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    with SQLiteStore(path) as again:
        assert again.get_checkpoint("t", "wf") == Checkpoint(chat_id="c", last_seen_message_id=9)


def test_sqlite_malformed_row_is_a_store_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.sqlite3"
    with SQLiteStore(path) as store:
        with sqlite3.connect(path) as conn:
            conn.execute(
                "INSERT INTO ledger (tenant, chat_id, tool_call_id, record) VALUES "
                "('t', 'c', 'x', 'not json')"
            )
        with pytest.raises(DurableStoreError, match="malformed"):
            store.get_ledger("t", "c", "x")


def test_sqlite_closed_store_and_bad_timeout(tmp_path: pathlib.Path) -> None:
    store = SQLiteStore(tmp_path / "s.sqlite3")
    store.close()
    store.close()
    with pytest.raises(CoderAgentError, match="closed"):
        store.get_journal("t", "c")
    with pytest.raises(CoderAgentError, match="closed"):
        store.put_journal("t", "c", JournalEntry(state="resumed", marker="m", attempt=1, at=0))
    with pytest.raises(CoderAgentError, match="busy_timeout"):
        SQLiteStore(tmp_path / "t.sqlite3", busy_timeout="1")  # type: ignore[arg-type]


def test_sqlite_write_failure_rolls_back(tmp_path: pathlib.Path) -> None:
    with SQLiteStore(tmp_path / "s.sqlite3") as store:
        store.put_checkpoint("t", "wf", Checkpoint(chat_id="c"))
        with pytest.raises(sqlite3.OperationalError), store._write() as cursor:
            cursor.execute("INSERT INTO nowhere VALUES (1)")
        assert store.get_checkpoint("t", "wf") == Checkpoint(chat_id="c")
        store.put_checkpoint("t", "wf", Checkpoint(chat_id="d"))
        assert store.get_checkpoint("t", "wf") == Checkpoint(chat_id="d")


def test_sqlite_waits_for_another_writer_up_to_its_busy_timeout(tmp_path: pathlib.Path) -> None:
    """Another process holding the write lock makes a write wait, then fail when the busy
    timeout passes: the durable machines report that as ``DurableStoreError``."""
    path = tmp_path / "s.sqlite3"
    with SQLiteStore(path, busy_timeout=0.1) as store:
        blocker = sqlite3.connect(path, isolation_level=None)
        blocker.execute("BEGIN IMMEDIATE")
        try:
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                store.put_checkpoint("t", "wf", Checkpoint(chat_id="c"))
            assert store.get_checkpoint("t", "wf") is None  # readers are not blocked (WAL)
        finally:
            blocker.execute("ROLLBACK")
            blocker.close()
        store.put_checkpoint("t", "wf", Checkpoint(chat_id="c"))


def _hammer(path: str, tenant: str, count: int) -> None:
    with SQLiteStore(path) as store:
        for n in range(count):
            store.put_ledger(tenant, "chat", f"call-{n}", LedgerEntry.committing())
            store.put_ledger(tenant, "chat", f"call-{n}", LedgerEntry.done(n))
            store.add_stranded(tenant, "wf", f"s-{n}")


def test_sqlite_is_safe_across_processes(tmp_path: pathlib.Path) -> None:
    """Several processes writing one file at once: every write lands, none is torn."""
    path = str(tmp_path / "s.sqlite3")
    SQLiteStore(path).close()
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_hammer, args=(path, f"t{i}", 40)) for i in range(3)]
    for proc in procs:
        proc.start()
    for proc in procs:
        proc.join(60)
        assert proc.exitcode == 0
    with SQLiteStore(path) as store:
        for i in range(3):
            for n in range(40):
                assert store.get_ledger(f"t{i}", "chat", f"call-{n}") == LedgerEntry.done(n)
        assert len(store.stranded_chats()) == 120


def test_check_store_names_what_is_missing() -> None:
    from coder_proto.durable import check_store

    check_store(MemoryStore())
    with pytest.raises(CoderAgentError, match="lacks get_checkpoint"):
        check_store(object())


def test_a_relayed_request_reports_its_response_failure_or_cancellation() -> None:
    """The adapter hands a durable machine's routed request to its driver as is."""
    from coder_proto._actions import CancelRequest, SendRequest
    from coder_proto._rest.http import HttpRequest, HttpResponse
    from coder_proto.durable._store_engine import RelayedRequest

    request = HttpRequest.build("get_chat", "GET", "/api/v2/chats/c")
    relay = RelayedRequest(request)
    assert relay.actions() == [SendRequest(request_id=1, request=request)]
    assert relay.actions() == [] and relay.next_deadline() is None and not relay.done
    relay.tick(1.0)
    response = HttpResponse(status=200, body=b"{}")
    relay.response_received(1, response, 1.0)
    relay.request_failed(1, "late", 1.0)
    assert relay.done and relay.result() is response and "get_chat" in repr(relay)
    failed = RelayedRequest(request)
    failed.request_failed(1, "connection refused", 1.0)
    failed.response_received(1, response, 1.0)
    assert failed.result() == "connection refused"
    cancelled = RelayedRequest(request)
    cancelled.actions()
    cancelled.cancel(1.0)
    cancelled.cancel(1.0)
    assert cancelled.done and cancelled.actions() == [CancelRequest(request_id=1)]
    assert isinstance(cancelled.result(), str)
