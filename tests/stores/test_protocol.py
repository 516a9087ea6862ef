"""The store protocol, method by method, on every store (``MemoryStore``, ``SQLiteStore``,
``PostgresStore``, ``AsyncPostgresStore``): what a write leaves, what a read returns, tenancy,
argument checks, and that every write is durable and visible to another store object on the
same data (another worker) when it returns."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

from coder_proto._errors import CoderAgentError
from coder_proto.durable import (
    Checkpoint,
    DurableStore,
    JournalEntry,
    LedgerEntry,
    StrandedChat,
    check_store,
)
from coder_proto.durable._store import STORE_METHODS, StoreOp

from .kinds import Blocking, StoreMaker

CP = Checkpoint(chat_id="c1", last_seen_message_id=3, step="[wf/a]", steps=("[wf/a]",))
ENTRY = JournalEntry(state="submitting", marker="[wf/a]", attempt=2, at=1712.25)


def test_every_store_has_every_method_of_its_protocol(store: Any) -> None:
    check_store(store)
    raw = store.inner if isinstance(store, Blocking) else store
    check_store(raw)
    if isinstance(store, Blocking):  # an AsyncDurableStore: the adapters await its methods
        assert all(inspect.iscoroutinefunction(getattr(raw, m)) for m in STORE_METHODS)
    else:
        assert isinstance(raw, DurableStore)
        assert not any(inspect.iscoroutinefunction(getattr(raw, m)) for m in STORE_METHODS)
    assert "Store(" in repr(store)


def test_checkpoints(store: Any) -> None:
    assert store.get_checkpoint("t", "wf") is None
    assert store.checkpointed_chat_ids() == frozenset()
    store.put_checkpoint("t", "wf", CP)
    assert store.get_checkpoint("t", "wf") == CP
    # Replaced whole, never merged.
    store.put_checkpoint("t", "wf", Checkpoint(chat_id="c3"))
    assert store.get_checkpoint("t", "wf") == Checkpoint(chat_id="c3")
    assert store.checkpointed_chat_ids("t") == frozenset({"c3"})
    store.delete_checkpoint("t", "wf")
    assert store.get_checkpoint("t", "wf") is None
    store.delete_checkpoint("t", "wf")  # deleting nothing is fine
    assert store.checkpointed_chat_ids("t") == frozenset()


def test_checkpointed_chat_ids_lists_each_chat_once(store: Any) -> None:
    store.put_checkpoint("t", "wf-1", Checkpoint(chat_id="shared"))
    store.put_checkpoint("t", "wf-2", Checkpoint(chat_id="shared"))
    store.put_checkpoint("t", "wf-3", Checkpoint(chat_id="own"))
    store.put_checkpoint("u", "wf-1", Checkpoint(chat_id="theirs"))
    assert store.checkpointed_chat_ids("t") == frozenset({"shared", "own"})
    assert store.checkpointed_chat_ids() == frozenset({"shared", "own", "theirs"})
    assert store.checkpointed_chat_ids("nobody") == frozenset()


def test_the_tool_ledger(store: Any) -> None:
    assert store.get_ledger("t", "c1", "call-1") is None
    store.put_ledger("t", "c1", "call-1", LedgerEntry.committing())
    assert store.get_ledger("t", "c1", "call-1") == LedgerEntry.committing()
    store.put_ledger("t", "c1", "call-1", LedgerEntry.done({"receipt": "r-1", "n": [1, 2.5]}))
    assert store.get_ledger("t", "c1", "call-1") == LedgerEntry.done(
        {"receipt": "r-1", "n": [1, 2.5]}
    )
    # Call ids are unique only within a chat.
    assert store.get_ledger("t", "c2", "call-1") is None
    store.put_ledger("t", "c2", "call-1", LedgerEntry.done(None))
    assert store.get_ledger("t", "c2", "call-1") == LedgerEntry.done(None)
    assert store.get_ledger("t", "c1", "call-1") == LedgerEntry.done(
        {"receipt": "r-1", "n": [1, 2.5]}
    )


def test_the_send_journal(store: Any) -> None:
    assert store.get_journal("t", "c1") is None
    store.put_journal("t", "c1", ENTRY)
    assert store.get_journal("t", "c1") == ENTRY
    verdict = JournalEntry(state="cut-short", marker="[wf/a]", attempt=3, at=1800.0)
    store.put_journal("t", "c1", verdict)
    assert store.get_journal("t", "c1") == verdict
    assert store.get_journal("t", "c2") is None


def test_stranded_chats_in_the_order_they_were_recorded(store: Any) -> None:
    assert store.stranded_chats() == ()
    for chat in ("s3", "s1", "s2"):
        store.add_stranded("t", "wf", chat)
    store.add_stranded("t", "other-wf", "s1")  # recorded once: the first record stays
    store.add_stranded("u", "wf", "s9")
    assert store.stranded_chats("t") == (
        StrandedChat(tenant="t", workflow_id="wf", chat_id="s3"),
        StrandedChat(tenant="t", workflow_id="wf", chat_id="s1"),
        StrandedChat(tenant="t", workflow_id="wf", chat_id="s2"),
    )
    assert [s.chat_id for s in store.stranded_chats()] == ["s3", "s1", "s2", "s9"]
    store.remove_stranded("t", "s1")
    store.remove_stranded("t", "s1")
    assert [s.chat_id for s in store.stranded_chats("t")] == ["s3", "s2"]
    store.add_stranded("t", "wf", "s1")  # removed, then recorded anew: last now
    assert [s.chat_id for s in store.stranded_chats("t")] == ["s3", "s2", "s1"]


def test_forget_chat_drops_its_ledger_and_journal_and_nothing_else(store: Any) -> None:
    store.put_checkpoint("t", "wf", Checkpoint(chat_id="c1"))
    for call in ("a", "b"):
        store.put_ledger("t", "c1", call, LedgerEntry.committing())
    store.put_ledger("t", "c2", "a", LedgerEntry.committing())
    store.put_ledger("u", "c1", "a", LedgerEntry.committing())
    store.put_journal("t", "c1", ENTRY)
    store.put_journal("u", "c1", ENTRY)
    store.add_stranded("t", "wf", "c1")
    store.forget_chat("t", "c1")
    assert store.get_ledger("t", "c1", "a") is None and store.get_ledger("t", "c1", "b") is None
    assert store.get_journal("t", "c1") is None
    assert store.get_ledger("t", "c2", "a") == LedgerEntry.committing()
    assert store.get_ledger("u", "c1", "a") == LedgerEntry.committing()
    assert store.get_journal("u", "c1") == ENTRY
    assert store.get_checkpoint("t", "wf") == Checkpoint(chat_id="c1")
    assert [s.chat_id for s in store.stranded_chats("t")] == ["c1"]
    store.forget_chat("t", "never-seen")


def test_tenants_never_see_each_others_records(store: Any) -> None:
    """One store serves several tenants: the same workflow, chat and call ids under two
    tenants are two sets of records."""
    for tenant, chat in (("acme", "c-acme"), ("globex", "c-globex")):
        store.put_checkpoint(tenant, "wf", Checkpoint(chat_id=chat))
        store.put_ledger(tenant, "c", "call", LedgerEntry.done(tenant))
        store.put_journal(tenant, "c", JournalEntry(state="resumed", marker=tenant, attempt=1, at=0))
        store.add_stranded(tenant, "wf", f"s-{tenant}")
        store.acquire_lease(tenant, "wf", f"owner-{tenant}", 100.0, 60.0)
    for tenant in ("acme", "globex"):
        assert store.get_checkpoint(tenant, "wf") == Checkpoint(chat_id=f"c-{tenant}")
        assert store.checkpointed_chat_ids(tenant) == frozenset({f"c-{tenant}"})
        assert store.get_ledger(tenant, "c", "call") == LedgerEntry.done(tenant)
        journal = store.get_journal(tenant, "c")
        assert journal is not None and journal.marker == tenant
        assert [s.chat_id for s in store.stranded_chats(tenant)] == [f"s-{tenant}"]
        lease = store.get_lease(tenant, "wf")
        assert lease is not None and lease.owner == f"owner-{tenant}"
    store.delete_checkpoint("acme", "wf")
    store.forget_chat("acme", "c")
    store.remove_stranded("acme", "s-acme")
    store.release_lease("acme", "wf", "owner-acme")
    assert store.get_checkpoint("globex", "wf") == Checkpoint(chat_id="c-globex")
    assert store.get_ledger("globex", "c", "call") == LedgerEntry.done("globex")
    assert store.get_journal("globex", "c") is not None
    assert len(store.stranded_chats("globex")) == 1
    assert store.get_lease("globex", "wf") is not None
    assert store.get_lease("acme", "wf") is None


def test_outputs_that_are_not_valid_unicode_are_stored_and_read_back(store: Any) -> None:
    """A tool's output can hold a lone surrogate (a model's arguments echoed back, bytes read
    with ``surrogateescape``) or a NUL: the store keeps it exactly, never an encoding
    error."""
    output = {"text": "half a pair: \ud800", "ok": "é✓ 日本", "nul": "a\x00b", "\udcff": 1}
    store.put_ledger("t", "c", "call-1", LedgerEntry.done(output))
    assert store.get_ledger("t", "c", "call-1") == LedgerEntry.done(output)


def test_keys_may_hold_any_printable_text(store: Any) -> None:
    """Tenants, workflow ids and chat ids are the user's: quotes, percent signs, SQL and
    non-ASCII text are data, nothing more."""
    tenant, workflow = "o'brien; DROP TABLE checkpoints; --", "wf-%s-{s}-ü"
    store.put_checkpoint(tenant, workflow, Checkpoint(chat_id="c-'\"%"))
    store.put_ledger(tenant, "c-'\"%", "call-?", LedgerEntry.committing())
    assert store.get_checkpoint(tenant, workflow) == Checkpoint(chat_id="c-'\"%")
    assert store.checkpointed_chat_ids(tenant) == frozenset({"c-'\"%"})
    assert store.get_ledger(tenant, "c-'\"%", "call-?") == LedgerEntry.committing()
    assert store.get_checkpoint("t", "wf") is None


@pytest.mark.parametrize(
    ("method", "args", "match"),
    [
        ("put_checkpoint", ("", "wf", Checkpoint(chat_id="c")), "tenant"),
        ("put_checkpoint", ("t", "", Checkpoint(chat_id="c")), "workflow_id"),
        ("put_checkpoint", ("t", "w\nf", Checkpoint(chat_id="c")), "control"),
        ("put_checkpoint", ("t", "wf", {"chat_id": "c"}), "Checkpoint"),
        ("put_ledger", ("t", "c", "", LedgerEntry.committing()), "tool_call_id"),
        ("put_ledger", ("t", "c", "x", "done"), "LedgerEntry"),
        ("put_ledger", (None, "c", "x", LedgerEntry.committing()), "tenant"),
        ("put_journal", ("t", "", ENTRY), "chat_id"),
        ("put_journal", ("t", "c", None), "JournalEntry"),
        ("add_stranded", ("t", "wf", ""), "chat_id"),
        ("add_stranded", ("t", " ", "c"), "workflow_id"),
        ("acquire_lease", ("t", "wf", "", 1.0, 60.0), "owner"),
        ("acquire_lease", ("", "wf", "me", 1.0, 60.0), "tenant"),
        ("acquire_lease", ("t", "wf", "me", float("nan"), 60.0), "now"),
        ("acquire_lease", ("t", "wf", "me", True, 60.0), "now"),
        ("acquire_lease", ("t", "wf", "me", 1.0, 0.0), "duration"),
        ("acquire_lease", ("t", "wf", "me", 1.0, -5), "duration"),
        ("acquire_lease", ("t", "wf", "me", 1.0, "60"), "duration"),
        ("acquire_lease", ("t", "wf", "me", 1e308, 1e308), "finite"),
        ("renew_lease", ("t", "wf", "me", 1.0, float("inf")), "duration"),
        ("renew_lease", ("t", "wf", "me\x00", 1.0, 60.0), "owner"),
    ],
)
def test_bad_arguments_are_refused_before_anything_is_written(
    store: Any, method: str, args: tuple[Any, ...], match: str
) -> None:
    with pytest.raises(CoderAgentError, match=match):
        getattr(store, method)(*args)
    assert store.checkpointed_chat_ids() == frozenset()
    assert store.stranded_chats() == ()
    assert store.get_lease("t", "wf") is None


def test_store_ops_run_every_method_and_check_the_values(store: Any) -> None:
    """What the durable machines do with a store: ``StoreOp(method, args).apply(store)``,
    then ``check`` the value against the protocol."""
    calls: list[tuple[str, tuple[Any, ...]]] = [
        ("put_checkpoint", ("t", "wf", CP)),
        ("get_checkpoint", ("t", "wf")),
        ("checkpointed_chat_ids", ("t",)),
        ("put_ledger", ("t", "c1", "x", LedgerEntry.committing())),
        ("get_ledger", ("t", "c1", "x")),
        ("put_journal", ("t", "c1", ENTRY)),
        ("get_journal", ("t", "c1")),
        ("add_stranded", ("t", "wf", "s")),
        ("stranded_chats", ("t",)),
        ("remove_stranded", ("t", "s")),
        ("forget_chat", ("t", "c1")),
        ("delete_checkpoint", ("t", "wf")),
        ("acquire_lease", ("t", "wf", "me", 10.0, 60.0)),
        ("get_lease", ("t", "wf")),
        ("renew_lease", ("t", "wf", "me", 20.0, 60.0)),
        ("release_lease", ("t", "wf", "me")),
    ]
    assert {name for name, _ in calls} == set(STORE_METHODS)
    for name, args in calls:
        op = StoreOp(name, args)
        value = op.check(op.apply(store))
        assert op.is_write == (value is None or name in ("acquire_lease", "renew_lease")), name
    assert store.get_lease("t", "wf") is None
    assert store.get_checkpoint("t", "wf") is None


def test_a_write_is_visible_to_another_store_object_when_it_returns(maker: StoreMaker) -> None:
    """Two workers on one database: what one wrote, the other reads at once."""
    first, second = maker.open(), maker.open()
    first.put_checkpoint("t", "wf", CP)
    first.put_ledger("t", "c1", "x", LedgerEntry.done(7))
    first.put_journal("t", "c1", ENTRY)
    first.add_stranded("t", "wf", "s")
    lease = first.acquire_lease("t", "wf", "one", 100.0, 60.0)
    assert second.get_checkpoint("t", "wf") == CP
    assert second.get_ledger("t", "c1", "x") == LedgerEntry.done(7)
    assert second.get_journal("t", "c1") == ENTRY
    assert second.stranded_chats("t") == (StrandedChat(tenant="t", workflow_id="wf", chat_id="s"),)
    assert second.acquire_lease("t", "wf", "two", 100.0, 60.0) == lease
