"""What only the SQLite store does: WAL mode, its lock and busy timeout, malformed rows, a
closed store, and its schema version (created, migrated from an older file, a newer file
refused)."""

from __future__ import annotations

import multiprocessing
import pathlib
import sqlite3
from typing import Any

import pytest

from coder_io_common.stores import SQLiteStore
from coder_io_common.stores.sqlite import MIGRATIONS, SCHEMA_VERSION
from coder_proto._errors import CoderAgentError
from coder_proto.durable import Checkpoint, DurableStoreError, JournalEntry


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


def test_a_malformed_lease_row_is_a_store_error(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.sqlite3"
    with SQLiteStore(path) as store:
        with sqlite3.connect(path) as conn:
            conn.execute("INSERT INTO leases VALUES ('t', 'wf', '', 5.0)")
        with pytest.raises(DurableStoreError, match="malformed lease record"):
            store.get_lease("t", "wf")
        with pytest.raises(DurableStoreError, match="malformed lease record"):
            store.acquire_lease("t", "wf", "me", 1.0, 60.0)


# -- the schema version ---------------------------------------------------------------------------


def schema_version(path: pathlib.Path) -> str:
    with sqlite3.connect(path) as conn:
        return str(conn.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()[0])


def tables(path: pathlib.Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        rows = conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'").fetchall()
    return {row[0] for row in rows}


def test_a_new_file_gets_the_current_schema(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "s.sqlite3"
    SQLiteStore(path).close()
    assert schema_version(path) == str(SCHEMA_VERSION) == "3"
    assert tables(path) == {
        "meta",
        "checkpoints",
        "ledger",
        "journal",
        "stranded",
        "leases",
        "lease_fences",
    }


def test_a_file_of_the_first_version_is_migrated_and_keeps_its_records(
    tmp_path: pathlib.Path,
) -> None:
    """A file written before leases existed (version 1, as the library wrote it then) opens
    with its records intact and leases working."""
    path = tmp_path / "old.sqlite3"
    with sqlite3.connect(path) as conn:
        for statement in MIGRATIONS[0]:
            conn.execute(statement)
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '1')")
        conn.execute(
            "INSERT INTO checkpoints VALUES ('t', 'wf', 'c1', ?)",
            ('{"chat_id": "c1", "outcome": "finished", "last_seen_message_id": 4}',),
        )
        conn.execute("INSERT INTO stranded VALUES ('t', 's1', 'wf', 1)")
    assert "leases" not in tables(path)
    with SQLiteStore(path) as store:
        assert store.get_checkpoint("t", "wf") == Checkpoint(chat_id="c1", last_seen_message_id=4)
        assert [s.chat_id for s in store.stranded_chats()] == ["s1"]
        assert store.acquire_lease("t", "wf", "me", 1.0, 60.0).owner == "me"
    assert schema_version(path) == "3"
    with SQLiteStore(path) as again:  # opening a current file changes nothing
        assert again.get_lease("t", "wf") is not None
    assert schema_version(path) == "3"


def test_a_file_of_the_second_version_gets_lease_counters_d37(tmp_path: pathlib.Path) -> None:
    """A file written before fencing tokens existed (version 2) opens with its records and
    its held lease intact: that lease reads with no token, and the next acquisition takes
    number 1 of the new counter. Migrating again (the table exists) changes nothing."""
    path = tmp_path / "v2.sqlite3"
    with sqlite3.connect(path) as conn:
        for statement in (*MIGRATIONS[0], *MIGRATIONS[1]):
            conn.execute(statement)
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', '2')")
        conn.execute("INSERT INTO leases VALUES ('t', 'wf', 'old-worker', 100.0)")
        conn.execute(
            "INSERT INTO checkpoints VALUES ('t', 'wf', 'c1', ?)",
            ('{"chat_id": "c1", "outcome": "finished", "last_seen_message_id": 4}',),
        )
    with SQLiteStore(path) as store:
        assert schema_version(path) == "3" and "lease_fences" in tables(path)
        assert store.get_checkpoint("t", "wf") == Checkpoint(chat_id="c1", last_seen_message_id=4)
        held = store.get_lease("t", "wf")
        assert held is not None and (held.owner, held.fencing_token) == ("old-worker", None)
        # Live at 50: still the old worker's.
        assert store.acquire_lease("t", "wf", "new", 50.0, 60.0).fencing_token is None
        taken = store.acquire_lease("t", "wf", "new", 100.0, 60.0)
        assert (taken.owner, taken.fencing_token) == ("new", 1)
    # The version row says 2 again (a half-finished upgrade): the migration runs once more.
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = '2' WHERE key = 'schema_version'")
    with SQLiteStore(path) as again:
        assert again.acquire_lease("t", "wf", "third", 500.0, 60.0).fencing_token == 2
    assert schema_version(path) == "3"


@pytest.mark.parametrize("version", ["4", "42"])
def test_a_file_of_a_newer_version_is_refused_untouched(
    tmp_path: pathlib.Path, version: str
) -> None:
    path = tmp_path / "new.sqlite3"
    SQLiteStore(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute("UPDATE meta SET value = ? WHERE key = 'schema_version'", (version,))
        conn.execute("DROP TABLE leases")  # whatever a newer layout looks like
    with pytest.raises(DurableStoreError, match=f"version {version}, newer than the version 3"):
        SQLiteStore(path)
    assert schema_version(path) == version and "leases" not in tables(path)


def test_a_file_with_a_garbled_version_is_refused(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "odd.sqlite3"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
        conn.execute("INSERT INTO meta VALUES ('schema_version', 'two')")
    with pytest.raises(DurableStoreError, match="not a durable store"):
        SQLiteStore(path)


def _open_at_once(path: str, start: Any, results: Any) -> None:
    start.wait()
    try:
        SQLiteStore(path).close()
    except Exception as exc:  # reported to the test, which shows it
        results.put(repr(exc))
    else:
        results.put("ok")


def test_processes_opening_a_new_file_at_once_all_get_the_store(tmp_path: pathlib.Path) -> None:
    # Putting a new file in WAL mode takes a lock SQLite does not wait for: opening one store
    # from several processes at the same instant failed for some with "database is locked".
    context = multiprocessing.get_context("fork")
    for attempt in range(20):
        path = str(tmp_path / f"s{attempt}.sqlite3")
        start = context.Barrier(8)
        results = context.Queue()
        procs = [
            context.Process(target=_open_at_once, args=(path, start, results)) for _ in range(8)
        ]
        for proc in procs:
            proc.start()
        outcomes = [results.get(timeout=60) for _ in procs]
        for proc in procs:
            proc.join(timeout=60)
        assert outcomes == ["ok"] * 8, f"attempt {attempt}: {outcomes}"
        with SQLiteStore(path) as store:
            assert store.get_checkpoint("t", "wf") is None


def test_a_store_that_cannot_open_closes_its_connection(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "s.sqlite3"
    opened: list[sqlite3.Connection] = []
    connect = sqlite3.connect

    def recording_connect(*args: Any, **kwargs: Any) -> sqlite3.Connection:
        conn = connect(*args, **kwargs)
        opened.append(conn)
        return conn

    monkeypatch.setattr(sqlite3, "connect", recording_connect)
    holder = connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")
    try:
        with pytest.raises(sqlite3.OperationalError, match="locked"):
            SQLiteStore(path, busy_timeout=0.2)
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    (conn,) = opened
    with pytest.raises(sqlite3.ProgrammingError, match="closed"):
        conn.execute("SELECT 1")
