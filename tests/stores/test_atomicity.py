"""Every store method is one transaction: when the database refuses part of a call, none of it
happens, and the store goes on working. A trigger that refuses deleting journal entries
makes ``forget_chat`` (a ledger delete, then a journal delete) fail halfway."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from coder_proto.durable import Checkpoint, JournalEntry, LedgerEntry
from tests.postgres_server import PostgresServer

from .kinds import StoreMaker

ENTRY = JournalEntry(state="resumed", marker="[wf/a]", attempt=1, at=5.0)


def freeze_journal(maker: StoreMaker, request: pytest.FixtureRequest) -> Any:
    """Install the trigger; return a function that removes it."""
    if maker.kind == "sqlite":
        path = maker.spec[1]
        with sqlite3.connect(path) as conn:
            conn.execute(
                "CREATE TRIGGER frozen BEFORE DELETE ON journal "
                "BEGIN SELECT RAISE(ABORT, 'the journal is frozen'); END"
            )

        def thaw() -> None:
            with sqlite3.connect(path) as conn:
                conn.execute("DROP TRIGGER frozen")

        return thaw
    server: PostgresServer = request.getfixturevalue("postgres_server")
    schema = f'"{maker.spec[2]}"'
    with server.admin() as conn:
        conn.execute(
            f"CREATE FUNCTION {schema}.frozen() RETURNS trigger LANGUAGE plpgsql AS "
            "$$ BEGIN RAISE EXCEPTION 'the journal is frozen'; END $$"
        )
        conn.execute(
            f"CREATE TRIGGER frozen BEFORE DELETE ON {schema}.journal "
            f"FOR EACH ROW EXECUTE FUNCTION {schema}.frozen()"
        )

    def thaw_pg() -> None:
        with server.admin() as conn:
            conn.execute(f"DROP TRIGGER frozen ON {schema}.journal")

    return thaw_pg


def test_a_call_the_database_refuses_halfway_changes_nothing(
    shared_maker: StoreMaker, request: pytest.FixtureRequest
) -> None:
    store = shared_maker.open()
    store.put_checkpoint("t", "wf", Checkpoint(chat_id="c1"))
    for call in ("a", "b"):
        store.put_ledger("t", "c1", call, LedgerEntry.done(call))
    store.put_journal("t", "c1", ENTRY)
    thaw = freeze_journal(shared_maker, request)
    with pytest.raises(Exception, match="the journal is frozen"):
        store.forget_chat("t", "c1")
    # The ledger delete that ran first was rolled back with the refused journal delete.
    assert store.get_ledger("t", "c1", "a") == LedgerEntry.done("a")
    assert store.get_ledger("t", "c1", "b") == LedgerEntry.done("b")
    assert store.get_journal("t", "c1") == ENTRY
    # The store goes on working after the failure (its connection was rolled back).
    store.put_ledger("t", "c1", "c", LedgerEntry.committing())
    assert store.acquire_lease("t", "wf", "me", 1.0, 60.0).owner == "me"
    thaw()
    store.forget_chat("t", "c1")
    assert store.get_ledger("t", "c1", "a") is None and store.get_journal("t", "c1") is None
    assert store.get_checkpoint("t", "wf") == Checkpoint(chat_id="c1")
