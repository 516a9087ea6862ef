"""The default durable store: one SQLite file in WAL mode, safe across processes
(docs/durable-workflows.md; ``coder_proto.durable._store``).

``SQLiteStore(path)`` implements ``coder_proto.durable.DurableStore``. Every write is one
``BEGIN IMMEDIATE`` transaction (the write lock is taken up front, so two processes never
deadlock upgrading a read lock) and is durable when the call returns (``synchronous=FULL``:
the guarantees of the durable layer rest on "written before the effect"). Reads see the last
committed state. Processes wait for each other's write lock up to ``busy_timeout`` seconds,
then the call raises (the durable machines report it as ``DurableStoreError``); opening a
store waits the same way, including for the switch of a new file to WAL mode, which SQLite
itself does not wait for when several processes open the file at once. A workflow
lease is taken with a compare-and-set inside one such transaction, so exactly one of several
processes racing for it wins.

The store is plain blocking code, usable from every adapter: the blocking adapter calls it
directly; the asyncio and trio adapters run each call in a worker thread, so a write waiting
on another process's lock never stalls the event loop (calls are short, but a busy timeout
is not). One connection per store object, guarded by a lock: share the object between
threads freely, but open a new one in each process (after a fork).

Records are kept as JSON text (``to_json`` of each record), so the file can be inspected with
the ``sqlite3`` shell and migrated without Python.

Schema. The file's layout version is kept in its ``meta`` table (``schema_version``). Opening
a file creates the tables when they are missing and migrates an older layout in the same
transaction; a file written by a newer version of this library is refused
(``DurableStoreError``) rather than misread. Versions: 1, the records; 2, workflow leases;
3, the lease counters (``lease_fences``: the last fencing token each workflow's counter gave
out, D37). A lease written before version 3 reads with no fencing token until it is next
acquired.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
import time
from collections.abc import Sequence
from types import TracebackType
from typing import Any, Final

from coder_proto import CoderAgentError
from coder_proto.adapter import dumps
from coder_proto.durable import (
    Checkpoint,
    DurableStoreError,
    JournalEntry,
    Lease,
    LedgerEntry,
    StrandedChat,
    check_key_part,
    check_lease_request,
)

__all__ = ["SCHEMA_VERSION", "SQLiteStore"]

#: The layout version this module writes (see the module docstring).
SCHEMA_VERSION: Final = 3

#: The statements that bring a file from version ``n - 1`` to ``n`` (index ``n - 1``).
MIGRATIONS: Final[tuple[Sequence[str], ...]] = (
    (
        """CREATE TABLE IF NOT EXISTS checkpoints (
            tenant TEXT NOT NULL, workflow_id TEXT NOT NULL, chat_id TEXT NOT NULL,
            record TEXT NOT NULL, PRIMARY KEY (tenant, workflow_id))""",
        "CREATE INDEX IF NOT EXISTS checkpoints_chat ON checkpoints (chat_id)",
        """CREATE TABLE IF NOT EXISTS ledger (
            tenant TEXT NOT NULL, chat_id TEXT NOT NULL, tool_call_id TEXT NOT NULL,
            record TEXT NOT NULL, PRIMARY KEY (tenant, chat_id, tool_call_id))""",
        """CREATE TABLE IF NOT EXISTS journal (
            tenant TEXT NOT NULL, chat_id TEXT NOT NULL, record TEXT NOT NULL,
            PRIMARY KEY (tenant, chat_id))""",
        """CREATE TABLE IF NOT EXISTS stranded (
            tenant TEXT NOT NULL, chat_id TEXT NOT NULL, workflow_id TEXT NOT NULL,
            seq INTEGER NOT NULL, PRIMARY KEY (tenant, chat_id))""",
    ),
    (
        """CREATE TABLE IF NOT EXISTS leases (
            tenant TEXT NOT NULL, workflow_id TEXT NOT NULL, owner TEXT NOT NULL,
            expires_at REAL NOT NULL, PRIMARY KEY (tenant, workflow_id))""",
    ),
    (
        """CREATE TABLE IF NOT EXISTS lease_fences (
            tenant TEXT NOT NULL, workflow_id TEXT NOT NULL, fence INTEGER NOT NULL,
            PRIMARY KEY (tenant, workflow_id))""",
    ),
)

#: The lease on one workflow with its fencing token: the holder is always the counter's last
#: acquisition (every acquisition takes the next number in the transaction that records it).
_GET_LEASE: Final = (
    "SELECT l.owner, l.expires_at, f.fence FROM leases AS l LEFT JOIN lease_fences AS f "
    "ON f.tenant = l.tenant AND f.workflow_id = l.workflow_id "
    "WHERE l.tenant = ? AND l.workflow_id = ?"
)
assert len(MIGRATIONS) == SCHEMA_VERSION


def _text(record: Any) -> str:
    # The core's request-body JSON: a lone surrogate, which SQLite text cannot hold, is
    # written as its escape and reads back the same.
    return dumps(record.to_json()).decode("utf-8")


def _load(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None  # from_json reports the malformed record


def _migrate(cursor: sqlite3.Cursor, path: str) -> None:
    """Create or upgrade the layout inside the caller's write transaction."""
    cursor.execute("CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)")
    row = cursor.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
    try:
        found = 0 if row is None else int(row[0])
    except ValueError:
        raise DurableStoreError(
            f"{path!r} is not a durable store: its schema version is {row[0]!r}"
        ) from None
    if found > SCHEMA_VERSION:
        raise DurableStoreError(
            f"{path!r} holds durable-store schema version {found}, newer than the version "
            f"{SCHEMA_VERSION} this library understands: upgrade coder-agents to use it"
        )
    for statements in MIGRATIONS[found:]:
        for statement in statements:
            cursor.execute(statement)
    if found < SCHEMA_VERSION:
        cursor.execute(
            "INSERT OR REPLACE INTO meta (key, value) VALUES ('schema_version', ?)",
            (str(SCHEMA_VERSION),),
        )


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    return getattr(exc, "sqlite_errorcode", None) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)


def _wal_mode(conn: sqlite3.Connection, timeout: float) -> str:
    """Put the file in WAL mode (a no-op once it is) and return the mode it is in.

    Switching a file to WAL takes a lock SQLite does not wait for with its busy handler, so
    processes that open a new file at the same instant may be refused with "database is
    locked": the switch is tried again, with a growing pause, until ``timeout`` has passed."""
    deadline = time.monotonic() + timeout
    pause = 0.002
    while True:
        try:
            mode = str(conn.execute("PRAGMA journal_mode").fetchone()[0]).lower()
            if mode != "wal":
                mode = str(conn.execute("PRAGMA journal_mode = WAL").fetchone()[0]).lower()
            return mode
        except sqlite3.OperationalError as exc:
            left = deadline - time.monotonic()
            if not _is_busy(exc) or left <= 0:
                raise
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.05)


class SQLiteStore:
    """A ``DurableStore`` in one SQLite file (see the module docstring). ``busy_timeout`` is
    how long a call waits for another process's write lock, in seconds."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout: float = 30.0) -> None:
        if isinstance(busy_timeout, bool) or not isinstance(busy_timeout, int | float):
            raise CoderAgentError(f"busy_timeout must be seconds, got {busy_timeout!r}")
        self.path = os.fspath(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = sqlite3.connect(
            self.path,
            timeout=float(busy_timeout),
            isolation_level=None,
            check_same_thread=False,
        )
        conn = self._conn
        try:
            conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout * 1000)}")
            mode = _wal_mode(conn, float(busy_timeout))
            if mode != "wal":  # pragma: no cover - e.g. a network filesystem
                raise CoderAgentError(f"cannot put {self.path!r} in WAL mode (got {mode!r})")
            conn.execute("PRAGMA synchronous = FULL")
            with self._write() as cursor:
                _migrate(cursor, self.path)
        except BaseException:
            self.close()
            raise

    def __repr__(self) -> str:
        return f"SQLiteStore({self.path!r})"

    # -- plumbing ----------------------------------------------------------------------------

    def _connection(self) -> sqlite3.Connection:
        conn = self._conn
        if conn is None:
            raise CoderAgentError("this SQLiteStore is closed")
        return conn

    def _write(self) -> _Transaction:
        return _Transaction(self)

    def _read(self, sql: str, args: tuple[Any, ...] = ()) -> list[Any]:
        with self._lock:
            return self._connection().execute(sql, args).fetchall()

    def close(self) -> None:
        """Close the connection (idempotent)."""
        with self._lock:
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    def __enter__(self) -> SQLiteStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- checkpoints -------------------------------------------------------------------------

    def get_checkpoint(self, tenant: str, workflow_id: str) -> Checkpoint | None:
        rows = self._read(
            "SELECT record FROM checkpoints WHERE tenant = ? AND workflow_id = ?",
            (tenant, workflow_id),
        )
        return Checkpoint.from_json(_load(rows[0][0])) if rows else None

    def put_checkpoint(self, tenant: str, workflow_id: str, checkpoint: Checkpoint) -> None:
        check_key_part(tenant, "tenant")
        check_key_part(workflow_id, "workflow_id")
        if not isinstance(checkpoint, Checkpoint):
            raise CoderAgentError("put_checkpoint needs a Checkpoint")
        with self._write() as cursor:
            cursor.execute(
                "INSERT OR REPLACE INTO checkpoints (tenant, workflow_id, chat_id, record) "
                "VALUES (?, ?, ?, ?)",
                (tenant, workflow_id, checkpoint.chat_id, _text(checkpoint)),
            )

    def delete_checkpoint(self, tenant: str, workflow_id: str) -> None:
        with self._write() as cursor:
            cursor.execute(
                "DELETE FROM checkpoints WHERE tenant = ? AND workflow_id = ?",
                (tenant, workflow_id),
            )

    def checkpointed_chat_ids(self, tenant: str | None = None) -> frozenset[str]:
        if tenant is None:
            rows = self._read("SELECT chat_id FROM checkpoints")
        else:
            rows = self._read("SELECT chat_id FROM checkpoints WHERE tenant = ?", (tenant,))
        return frozenset(row[0] for row in rows)

    # -- the tool ledger ---------------------------------------------------------------------

    def get_ledger(self, tenant: str, chat_id: str, tool_call_id: str) -> LedgerEntry | None:
        rows = self._read(
            "SELECT record FROM ledger WHERE tenant = ? AND chat_id = ? AND tool_call_id = ?",
            (tenant, chat_id, tool_call_id),
        )
        return LedgerEntry.from_json(_load(rows[0][0])) if rows else None

    def put_ledger(self, tenant: str, chat_id: str, tool_call_id: str, entry: LedgerEntry) -> None:
        check_key_part(tenant, "tenant")
        check_key_part(chat_id, "chat_id")
        check_key_part(tool_call_id, "tool_call_id")
        if not isinstance(entry, LedgerEntry):
            raise CoderAgentError("put_ledger needs a LedgerEntry")
        with self._write() as cursor:
            cursor.execute(
                "INSERT OR REPLACE INTO ledger (tenant, chat_id, tool_call_id, record) "
                "VALUES (?, ?, ?, ?)",
                (tenant, chat_id, tool_call_id, _text(entry)),
            )

    # -- the send journal --------------------------------------------------------------------

    def get_journal(self, tenant: str, chat_id: str) -> JournalEntry | None:
        rows = self._read(
            "SELECT record FROM journal WHERE tenant = ? AND chat_id = ?", (tenant, chat_id)
        )
        return JournalEntry.from_json(_load(rows[0][0])) if rows else None

    def put_journal(self, tenant: str, chat_id: str, entry: JournalEntry) -> None:
        check_key_part(tenant, "tenant")
        check_key_part(chat_id, "chat_id")
        if not isinstance(entry, JournalEntry):
            raise CoderAgentError("put_journal needs a JournalEntry")
        with self._write() as cursor:
            cursor.execute(
                "INSERT OR REPLACE INTO journal (tenant, chat_id, record) VALUES (?, ?, ?)",
                (tenant, chat_id, _text(entry)),
            )

    # -- stranded chats ----------------------------------------------------------------------

    def add_stranded(self, tenant: str, workflow_id: str, chat_id: str) -> None:
        StrandedChat(tenant=tenant, workflow_id=workflow_id, chat_id=chat_id)
        with self._write() as cursor:
            cursor.execute(
                "INSERT OR IGNORE INTO stranded (tenant, chat_id, workflow_id, seq) VALUES "
                "(?, ?, ?, (SELECT COALESCE(MAX(seq), 0) + 1 FROM stranded))",
                (tenant, chat_id, workflow_id),
            )

    def stranded_chats(self, tenant: str | None = None) -> tuple[StrandedChat, ...]:
        if tenant is None:
            rows = self._read("SELECT tenant, workflow_id, chat_id FROM stranded ORDER BY seq")
        else:
            rows = self._read(
                "SELECT tenant, workflow_id, chat_id FROM stranded WHERE tenant = ? ORDER BY seq",
                (tenant,),
            )
        return tuple(StrandedChat(tenant=t, workflow_id=w, chat_id=c) for t, w, c in rows)

    def remove_stranded(self, tenant: str, chat_id: str) -> None:
        with self._write() as cursor:
            cursor.execute(
                "DELETE FROM stranded WHERE tenant = ? AND chat_id = ?", (tenant, chat_id)
            )

    def forget_chat(self, tenant: str, chat_id: str) -> None:
        with self._write() as cursor:
            cursor.execute("DELETE FROM ledger WHERE tenant = ? AND chat_id = ?", (tenant, chat_id))
            cursor.execute(
                "DELETE FROM journal WHERE tenant = ? AND chat_id = ?", (tenant, chat_id)
            )

    # -- workflow leases ---------------------------------------------------------------------

    def acquire_lease(
        self, tenant: str, workflow_id: str, owner: str, now: float, duration: float
    ) -> Lease:
        expires_at = check_lease_request(tenant, workflow_id, owner, now, duration)
        with self._write() as cursor:
            # The compare-and-set: insert, or take over a row that expired or is ours.
            cursor.execute(
                "INSERT INTO leases (tenant, workflow_id, owner, expires_at) VALUES (?, ?, ?, ?) "
                "ON CONFLICT (tenant, workflow_id) DO UPDATE SET owner = excluded.owner, "
                "expires_at = excluded.expires_at "
                "WHERE leases.expires_at <= ? OR leases.owner = excluded.owner",
                (tenant, workflow_id, owner, expires_at, float(now)),
            )
            if cursor.rowcount == 1:
                # Taken: the next number of the workflow's counter, in the same transaction.
                cursor.execute(
                    "INSERT INTO lease_fences (tenant, workflow_id, fence) VALUES (?, ?, 1) "
                    "ON CONFLICT (tenant, workflow_id) DO UPDATE SET fence = fence + 1",
                    (tenant, workflow_id),
                )
            row = cursor.execute(_GET_LEASE, (tenant, workflow_id)).fetchone()
        return _lease(tenant, workflow_id, *row)

    def renew_lease(
        self, tenant: str, workflow_id: str, owner: str, now: float, duration: float
    ) -> bool:
        expires_at = check_lease_request(tenant, workflow_id, owner, now, duration)
        with self._write() as cursor:
            cursor.execute(
                "UPDATE leases SET expires_at = ? "
                "WHERE tenant = ? AND workflow_id = ? AND owner = ?",
                (expires_at, tenant, workflow_id, owner),
            )
            return cursor.rowcount == 1

    def release_lease(self, tenant: str, workflow_id: str, owner: str) -> None:
        with self._write() as cursor:
            cursor.execute(
                "DELETE FROM leases WHERE tenant = ? AND workflow_id = ? AND owner = ?",
                (tenant, workflow_id, owner),
            )

    def get_lease(self, tenant: str, workflow_id: str) -> Lease | None:
        rows = self._read(_GET_LEASE, (tenant, workflow_id))
        return _lease(tenant, workflow_id, *rows[0]) if rows else None


def _lease(tenant: str, workflow_id: str, owner: Any, expires_at: Any, fence: Any) -> Lease:
    try:
        return Lease(
            tenant=tenant,
            workflow_id=workflow_id,
            owner=owner,
            expires_at=expires_at,
            fencing_token=fence,
        )
    except CoderAgentError as exc:
        raise DurableStoreError(f"malformed lease record: {exc.message}") from exc


class _Transaction:
    """``BEGIN IMMEDIATE`` ... ``COMMIT`` (``ROLLBACK`` on an exception), holding the store's
    thread lock."""

    def __init__(self, store: SQLiteStore) -> None:
        self._store = store

    def __enter__(self) -> sqlite3.Cursor:
        self._store._lock.acquire()
        try:
            conn = self._store._connection()
            conn.execute("BEGIN IMMEDIATE")
            return conn.cursor()
        except BaseException:
            self._store._lock.release()
            raise

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        try:
            conn = self._store._connection()
            if exc_type is None:
                try:
                    conn.execute("COMMIT")
                except BaseException:
                    if conn.in_transaction:
                        conn.execute("ROLLBACK")
                    raise
            elif conn.in_transaction:
                conn.execute("ROLLBACK")
        finally:
            self._store._lock.release()
