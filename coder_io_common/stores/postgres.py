"""Durable stores in PostgreSQL, for a fleet of workers sharing one database
(docs/durable-workflows.md; ``coder_proto.durable._store``; D27). Needs psycopg 3 and psycopg-pool (the
``postgres`` extra).

``PostgresStore`` implements ``coder_proto.durable.DurableStore`` (plain methods: the blocking
adapter calls them directly, the asyncio and trio adapters in worker threads);
``AsyncPostgresStore`` implements ``AsyncDurableStore`` on psycopg's asyncio driver (the
asyncio adapter awaits it; on trio use ``PostgresStore``, since psycopg's async connections
need asyncio). They are two classes because psycopg's blocking and asyncio connections are
two kinds of object and an adapter tells a store's kind by its methods; everything else
(statements, schema, migrations, record encoding) is written once below, as small programs
both classes run.

Connections. Give exactly one of: a connection string (``conninfo``; the store owns a pool of
up to ``max_size`` connections, opened on first use and closed by ``close()``; a connection
that died while idle, after a database restart or failover, is replaced before it is used,
and a database that is down makes a call fail after ``timeout`` without breaking the store
for the calls after it comes back), a psycopg
pool you own (``pool=``, open; the store borrows a connection per call and never closes the
pool), or one connection you own (``connection=``; calls take turns on it, and it must not be
inside a transaction of yours when the store uses it).

Guarantees. Every method runs in one transaction of its own, so it is atomic and durable when
it returns (the guarantees of the durable layer rest on "written before the effect"). The
workflow lease is taken with one compare-and-set statement (``INSERT ... ON CONFLICT DO
UPDATE ... WHERE`` expired-or-ours ``RETURNING``), so exactly one of several workers racing
for it wins. Records are kept as JSON text (``to_json`` of each record), keyed by tenant like
every store, so one database serves several tenants. The store keeps only what the durable
records hold: never the session token; its repr names host, port, database, user and schema,
never a password.

Schema. The tables live in their own PostgreSQL schema (``schema=``, default
``coder_durable``), created on first use together with a ``schema_version`` table that
records each applied layout version. Each store object checks the version once, under a
transaction-scoped advisory lock (so workers starting together migrate once): a missing or
older layout is created or migrated in that transaction; a layout newer than this library's
is refused with ``DurableStoreError``. A database role that may not create schemas works once
the layout is current. Versions: 1, the records; 2, workflow leases; 3, the lease counters
(``lease_fences``: the last fencing token each workflow's counter gave out, D37; a lease
written before it reads with no fencing token until it is next acquired). The database must
use the UTF8 encoding.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Sequence
from types import TracebackType
from typing import Any, Final, NamedTuple, TypeVar

try:
    import psycopg
    from psycopg import sql
    from psycopg.conninfo import conninfo_to_dict
    from psycopg.pq import TransactionStatus
    from psycopg_pool import AsyncConnectionPool, ConnectionPool
except ImportError as exc:  # pragma: no cover - depends on the optional extra
    raise ImportError(
        "the PostgreSQL durable stores need psycopg 3 and psycopg-pool: "
        "pip install 'coder-agents[postgres]'"
    ) from exc

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

__all__ = ["DEFAULT_SCHEMA", "SCHEMA_VERSION", "AsyncPostgresStore", "PostgresStore"]

T = TypeVar("T")

#: The PostgreSQL schema that holds the tables unless ``schema=`` says otherwise.
DEFAULT_SCHEMA: Final = "coder_durable"

#: The layout version this module writes (see the module docstring).
SCHEMA_VERSION: Final = 3

#: The statements that bring a schema from version ``n - 1`` to ``n`` (index ``n - 1``);
#: ``{s}`` is the store's schema.
MIGRATIONS: Final[tuple[Sequence[str], ...]] = (
    (
        """CREATE TABLE {s}.checkpoints (
            tenant text NOT NULL, workflow_id text NOT NULL, chat_id text NOT NULL,
            record text NOT NULL, PRIMARY KEY (tenant, workflow_id))""",
        "CREATE INDEX checkpoints_chat ON {s}.checkpoints (tenant, chat_id)",
        """CREATE TABLE {s}.ledger (
            tenant text NOT NULL, chat_id text NOT NULL, tool_call_id text NOT NULL,
            record text NOT NULL, PRIMARY KEY (tenant, chat_id, tool_call_id))""",
        """CREATE TABLE {s}.journal (
            tenant text NOT NULL, chat_id text NOT NULL, record text NOT NULL,
            PRIMARY KEY (tenant, chat_id))""",
        """CREATE TABLE {s}.stranded (
            tenant text NOT NULL, chat_id text NOT NULL, workflow_id text NOT NULL,
            seq bigint GENERATED ALWAYS AS IDENTITY, PRIMARY KEY (tenant, chat_id))""",
    ),
    (
        """CREATE TABLE {s}.leases (
            tenant text NOT NULL, workflow_id text NOT NULL, owner text NOT NULL,
            expires_at double precision NOT NULL, PRIMARY KEY (tenant, workflow_id))""",
    ),
    (
        """CREATE TABLE IF NOT EXISTS {s}.lease_fences (
            tenant text NOT NULL, workflow_id text NOT NULL, fence bigint NOT NULL,
            PRIMARY KEY (tenant, workflow_id))""",
    ),
)
assert len(MIGRATIONS) == SCHEMA_VERSION

# PostgreSQL truncates longer identifiers (NAMEDATALEN - 1 bytes).
_MAX_IDENTIFIER_BYTES: Final = 63
# Connection parameters a repr may show (never a password or a key).
_SHOWN_PARAMETERS: Final = ("host", "port", "dbname", "user")


# -- statements and programs ------------------------------------------------------------------


class _Query(NamedTuple):
    """One statement of a program and its parameters; the program receives its rows."""

    statement: sql.Composed
    params: tuple[Any, ...] = ()


#: A store operation written once for both drivers: it yields queries, receives each one's
#: rows (``[]`` for a statement without a result), and returns the method's value. A driver
#: runs the whole program in one transaction.
_Program = Generator[_Query, list[tuple[Any, ...]], T]


class _Statements:
    """Every statement of the store, composed once for its schema."""

    def __init__(self, schema: str) -> None:
        self.schema = schema
        ident = sql.Identifier(schema)

        def q(text: str) -> sql.Composed:
            return sql.SQL(text).format(s=ident)

        self.migrations = tuple(tuple(q(text) for text in step) for step in MIGRATIONS)
        self.create_schema = q("CREATE SCHEMA {s}")
        self.create_versions = q(
            "CREATE TABLE {s}.schema_version (version integer PRIMARY KEY, "
            "applied_at timestamptz NOT NULL DEFAULT now())"
        )
        self.read_version = q("SELECT coalesce(max(version), 0) FROM {s}.schema_version")
        self.add_version = q("INSERT INTO {s}.schema_version (version) VALUES (%s)")

        self.get_checkpoint = q(
            "SELECT record FROM {s}.checkpoints WHERE tenant = %s AND workflow_id = %s"
        )
        self.put_checkpoint = q(
            "INSERT INTO {s}.checkpoints (tenant, workflow_id, chat_id, record) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (tenant, workflow_id) "
            "DO UPDATE SET chat_id = EXCLUDED.chat_id, record = EXCLUDED.record"
        )
        self.delete_checkpoint = q(
            "DELETE FROM {s}.checkpoints WHERE tenant = %s AND workflow_id = %s"
        )
        self.all_checkpointed = q("SELECT DISTINCT chat_id FROM {s}.checkpoints")
        self.tenant_checkpointed = q(
            "SELECT DISTINCT chat_id FROM {s}.checkpoints WHERE tenant = %s"
        )
        self.get_ledger = q(
            "SELECT record FROM {s}.ledger "
            "WHERE tenant = %s AND chat_id = %s AND tool_call_id = %s"
        )
        self.put_ledger = q(
            "INSERT INTO {s}.ledger (tenant, chat_id, tool_call_id, record) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (tenant, chat_id, tool_call_id) "
            "DO UPDATE SET record = EXCLUDED.record"
        )
        self.get_journal = q("SELECT record FROM {s}.journal WHERE tenant = %s AND chat_id = %s")
        self.put_journal = q(
            "INSERT INTO {s}.journal (tenant, chat_id, record) VALUES (%s, %s, %s) "
            "ON CONFLICT (tenant, chat_id) DO UPDATE SET record = EXCLUDED.record"
        )
        self.add_stranded = q(
            "INSERT INTO {s}.stranded (tenant, chat_id, workflow_id) VALUES (%s, %s, %s) "
            "ON CONFLICT (tenant, chat_id) DO NOTHING"
        )
        self.all_stranded = q(
            "SELECT tenant, workflow_id, chat_id FROM {s}.stranded ORDER BY seq"
        )
        self.tenant_stranded = q(
            "SELECT tenant, workflow_id, chat_id FROM {s}.stranded WHERE tenant = %s "
            "ORDER BY seq"
        )
        self.remove_stranded = q("DELETE FROM {s}.stranded WHERE tenant = %s AND chat_id = %s")
        self.forget_ledger = q("DELETE FROM {s}.ledger WHERE tenant = %s AND chat_id = %s")
        self.forget_journal = q("DELETE FROM {s}.journal WHERE tenant = %s AND chat_id = %s")
        # The compare-and-set: insert, or take over a row that expired or is ours. A row it
        # does not update is still locked by it until the transaction ends, so the holder
        # read next is the one the comparison saw.
        self.acquire_lease = q(
            "INSERT INTO {s}.leases AS l (tenant, workflow_id, owner, expires_at) "
            "VALUES (%s, %s, %s, %s) ON CONFLICT (tenant, workflow_id) "
            "DO UPDATE SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at "
            "WHERE l.expires_at <= %s OR l.owner = EXCLUDED.owner "
            "RETURNING owner, expires_at"
        )
        # Taken: the next number of the workflow's counter, in the same transaction (D37).
        self.next_fence = q(
            "INSERT INTO {s}.lease_fences AS f (tenant, workflow_id, fence) "
            "VALUES (%s, %s, 1) ON CONFLICT (tenant, workflow_id) "
            "DO UPDATE SET fence = f.fence + 1 RETURNING fence"
        )
        # The holder is always the counter's last acquisition.
        self.get_lease = q(
            "SELECT l.owner, l.expires_at, f.fence FROM {s}.leases AS l "
            "LEFT JOIN {s}.lease_fences AS f "
            "ON f.tenant = l.tenant AND f.workflow_id = l.workflow_id "
            "WHERE l.tenant = %s AND l.workflow_id = %s"
        )
        self.renew_lease = q(
            "UPDATE {s}.leases SET expires_at = %s "
            "WHERE tenant = %s AND workflow_id = %s AND owner = %s RETURNING 1"
        )
        self.release_lease = q(
            "DELETE FROM {s}.leases WHERE tenant = %s AND workflow_id = %s AND owner = %s"
        )


_LOCK = sql.SQL("SELECT pg_advisory_xact_lock(hashtext(%s))").format()
_ENCODING = sql.SQL("SELECT current_setting('server_encoding')").format()
_SCHEMA_EXISTS = sql.SQL("SELECT 1 FROM pg_catalog.pg_namespace WHERE nspname = %s").format()
_VERSIONS_EXIST = sql.SQL(
    "SELECT 1 FROM pg_catalog.pg_tables WHERE schemaname = %s AND tablename = 'schema_version'"
).format()


def _migrate(st: _Statements) -> _Program[None]:
    """Create or upgrade the layout; refuse a newer one (see the module docstring)."""
    yield _Query(_LOCK, (f"coder_durable schema {st.schema}",))
    ((encoding,),) = yield _Query(_ENCODING)
    if encoding != "UTF8":
        raise DurableStoreError(
            f"the durable store needs a UTF8 database; this one is encoded {encoding}"
        )
    if (yield _Query(_VERSIONS_EXIST, (st.schema,))):
        ((found,),) = yield _Query(st.read_version)
    else:
        found = 0
        if not (yield _Query(_SCHEMA_EXISTS, (st.schema,))):
            yield _Query(st.create_schema)
        yield _Query(st.create_versions)
    if found > SCHEMA_VERSION:
        raise DurableStoreError(
            f"PostgreSQL schema {st.schema!r} holds durable-store schema version {found}, newer "
            f"than the version {SCHEMA_VERSION} this library understands: upgrade coder-agents "
            "to use it"
        )
    for version in range(found + 1, SCHEMA_VERSION + 1):
        for statement in st.migrations[version - 1]:
            yield _Query(statement)
        yield _Query(st.add_version, (version,))


def _text(record: Any) -> str:
    # The core's request-body JSON: a lone surrogate, which PostgreSQL text cannot hold, is
    # written as its escape and reads back the same.
    return dumps(record.to_json()).decode("utf-8")


def _load(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None  # from_json reports the malformed record


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


def _get_checkpoint(st: _Statements, tenant: str, workflow_id: str) -> _Program[Checkpoint | None]:
    rows = yield _Query(st.get_checkpoint, (tenant, workflow_id))
    return Checkpoint.from_json(_load(rows[0][0])) if rows else None


def _put_checkpoint(
    st: _Statements, tenant: str, workflow_id: str, checkpoint: Checkpoint
) -> _Program[None]:
    check_key_part(tenant, "tenant")
    check_key_part(workflow_id, "workflow_id")
    if not isinstance(checkpoint, Checkpoint):
        raise CoderAgentError("put_checkpoint needs a Checkpoint")
    yield _Query(st.put_checkpoint, (tenant, workflow_id, checkpoint.chat_id, _text(checkpoint)))


def _delete_checkpoint(st: _Statements, tenant: str, workflow_id: str) -> _Program[None]:
    yield _Query(st.delete_checkpoint, (tenant, workflow_id))


def _checkpointed_chat_ids(st: _Statements, tenant: str | None) -> _Program[frozenset[str]]:
    if tenant is None:
        rows = yield _Query(st.all_checkpointed)
    else:
        rows = yield _Query(st.tenant_checkpointed, (tenant,))
    return frozenset(row[0] for row in rows)


def _get_ledger(
    st: _Statements, tenant: str, chat_id: str, tool_call_id: str
) -> _Program[LedgerEntry | None]:
    rows = yield _Query(st.get_ledger, (tenant, chat_id, tool_call_id))
    return LedgerEntry.from_json(_load(rows[0][0])) if rows else None


def _put_ledger(
    st: _Statements, tenant: str, chat_id: str, tool_call_id: str, entry: LedgerEntry
) -> _Program[None]:
    check_key_part(tenant, "tenant")
    check_key_part(chat_id, "chat_id")
    check_key_part(tool_call_id, "tool_call_id")
    if not isinstance(entry, LedgerEntry):
        raise CoderAgentError("put_ledger needs a LedgerEntry")
    yield _Query(st.put_ledger, (tenant, chat_id, tool_call_id, _text(entry)))


def _get_journal(st: _Statements, tenant: str, chat_id: str) -> _Program[JournalEntry | None]:
    rows = yield _Query(st.get_journal, (tenant, chat_id))
    return JournalEntry.from_json(_load(rows[0][0])) if rows else None


def _put_journal(
    st: _Statements, tenant: str, chat_id: str, entry: JournalEntry
) -> _Program[None]:
    check_key_part(tenant, "tenant")
    check_key_part(chat_id, "chat_id")
    if not isinstance(entry, JournalEntry):
        raise CoderAgentError("put_journal needs a JournalEntry")
    yield _Query(st.put_journal, (tenant, chat_id, _text(entry)))


def _add_stranded(
    st: _Statements, tenant: str, workflow_id: str, chat_id: str
) -> _Program[None]:
    StrandedChat(tenant=tenant, workflow_id=workflow_id, chat_id=chat_id)
    yield _Query(st.add_stranded, (tenant, chat_id, workflow_id))


def _stranded_chats(st: _Statements, tenant: str | None) -> _Program[tuple[StrandedChat, ...]]:
    if tenant is None:
        rows = yield _Query(st.all_stranded)
    else:
        rows = yield _Query(st.tenant_stranded, (tenant,))
    return tuple(StrandedChat(tenant=t, workflow_id=w, chat_id=c) for t, w, c in rows)


def _remove_stranded(st: _Statements, tenant: str, chat_id: str) -> _Program[None]:
    yield _Query(st.remove_stranded, (tenant, chat_id))


def _forget_chat(st: _Statements, tenant: str, chat_id: str) -> _Program[None]:
    yield _Query(st.forget_ledger, (tenant, chat_id))
    yield _Query(st.forget_journal, (tenant, chat_id))


def _acquire_lease(
    st: _Statements, tenant: str, workflow_id: str, owner: str, now: float, duration: float
) -> _Program[Lease]:
    expires_at = check_lease_request(tenant, workflow_id, owner, now, duration)
    rows = yield _Query(
        st.acquire_lease, (tenant, workflow_id, owner, expires_at, float(now))
    )
    if not rows:
        rows = yield _Query(st.get_lease, (tenant, workflow_id))
        return _lease(tenant, workflow_id, *rows[0])
    ((fence,),) = yield _Query(st.next_fence, (tenant, workflow_id))
    ((holder, until),) = rows
    return _lease(tenant, workflow_id, holder, until, fence)


def _renew_lease(
    st: _Statements, tenant: str, workflow_id: str, owner: str, now: float, duration: float
) -> _Program[bool]:
    expires_at = check_lease_request(tenant, workflow_id, owner, now, duration)
    rows = yield _Query(st.renew_lease, (expires_at, tenant, workflow_id, owner))
    return bool(rows)


def _release_lease(st: _Statements, tenant: str, workflow_id: str, owner: str) -> _Program[None]:
    yield _Query(st.release_lease, (tenant, workflow_id, owner))


def _get_lease(st: _Statements, tenant: str, workflow_id: str) -> _Program[Lease | None]:
    rows = yield _Query(st.get_lease, (tenant, workflow_id))
    return _lease(tenant, workflow_id, *rows[0]) if rows else None


# -- what both classes share ------------------------------------------------------------------


def _check_schema(schema: object) -> str:
    if type(schema) is not str or not schema or "\x00" in schema:
        raise CoderAgentError(f"schema must be a non-empty name, got {schema!r}")
    if len(schema.encode("utf-8")) > _MAX_IDENTIFIER_BYTES:
        raise CoderAgentError(f"schema must be at most 63 bytes long, got {schema!r}")
    return schema


def _check_sizes(max_size: object, timeout: object) -> tuple[int, float]:
    if type(max_size) is not int or max_size < 1:
        raise CoderAgentError(f"max_size must be a positive integer, got {max_size!r}")
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) or not timeout > 0:
        raise CoderAgentError(f"timeout must be positive seconds, got {timeout!r}")
    return max_size, float(timeout)


def _one_source(conninfo: object, pool: object, connection: object) -> None:
    given = [x for x in (conninfo, pool, connection) if x is not None]
    if len(given) != 1:
        raise CoderAgentError("give exactly one of conninfo, pool= or connection=")
    if conninfo is not None:
        if type(conninfo) is not str:
            raise CoderAgentError("conninfo must be a PostgreSQL connection string")
        try:
            conninfo_to_dict(conninfo)
            valid = True
        except psycopg.Error:
            valid = False
        if not valid:  # raised outside the handler: psycopg's message may quote a password
            raise CoderAgentError("conninfo is not a valid PostgreSQL connection string")


def _pool_parameters(conninfo: object) -> dict[str, Any]:
    # A pool's conninfo may be a function giving a fresh string for each connection.
    return conninfo_to_dict(conninfo) if isinstance(conninfo, str) else {}


def _shown(parameters: dict[str, Any]) -> str:
    return "".join(
        f", {key}={str(parameters[key])!r}" for key in _SHOWN_PARAMETERS if parameters.get(key)
    )


def _busy_connection() -> CoderAgentError:
    return CoderAgentError(
        "the connection given to the durable store is inside a transaction; the store runs "
        "each call in a transaction of its own (durable when the call returns), so give it a "
        "connection it can use alone, or a pool"
    )


class _Base:
    """State and helpers both stores share."""

    _kind: str

    def __init__(self, schema: str, max_size: int, timeout: float) -> None:
        self._statements = _Statements(_check_schema(schema))
        self._max_size, self._timeout = _check_sizes(max_size, timeout)
        self._ready = False
        self._closed = False
        self._parameters: dict[str, Any] = {}

    @property
    def schema(self) -> str:
        """The PostgreSQL schema holding the store's tables."""
        return self._statements.schema

    def __repr__(self) -> str:
        return f"{self._kind}(schema={self.schema!r}{_shown(self._parameters)})"

    def _check_open(self) -> None:
        if self._closed:
            raise CoderAgentError(f"this {self._kind} is closed")


# -- the blocking store -----------------------------------------------------------------------


class PostgresStore(_Base):
    """A ``DurableStore`` in PostgreSQL (see the module docstring): ``PostgresStore(conninfo)``
    owns a pool of up to ``max_size`` connections; ``pool=`` borrows from an open
    ``psycopg_pool.ConnectionPool``; ``connection=`` uses one ``psycopg.Connection``.
    ``timeout`` is how long a call waits for a connection, in seconds. Safe to share between
    threads; open a new one in each process."""

    _kind = "PostgresStore"

    def __init__(
        self,
        conninfo: str | None = None,
        *,
        pool: ConnectionPool[Any] | None = None,
        connection: psycopg.Connection[Any] | None = None,
        schema: str = DEFAULT_SCHEMA,
        max_size: int = 4,
        timeout: float = 30.0,
    ) -> None:
        super().__init__(schema, max_size, timeout)
        _one_source(conninfo, pool, connection)
        self._lock = threading.Lock()
        self._connection_lock = threading.Lock()
        self._connection = connection
        self._owns_pool = conninfo is not None
        if conninfo is not None:
            self._parameters = conninfo_to_dict(conninfo)
            pool = ConnectionPool(
                conninfo,
                min_size=1,
                max_size=self._max_size,
                open=False,
                kwargs={"autocommit": True},
                check=ConnectionPool.check_connection,
                name=f"coder-durable-{self.schema}",
            )
        elif pool is not None:
            if not isinstance(pool, ConnectionPool):
                raise CoderAgentError("pool= must be a psycopg_pool.ConnectionPool")
            self._parameters = _pool_parameters(pool.conninfo)
        else:
            if not isinstance(connection, psycopg.Connection):
                raise CoderAgentError("connection= must be a psycopg.Connection")
            self._parameters = {} if connection.closed else connection.info.get_parameters()
        self._pool = pool

    def close(self) -> None:
        """Close the pool the store owns (idempotent); a pool or connection you gave it stays
        open. Calls after ``close()`` raise ``CoderAgentError``."""
        with self._lock:
            self._closed = True
            if self._owns_pool and self._pool is not None:
                self._pool.close()

    def __enter__(self) -> PostgresStore:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # -- plumbing ----------------------------------------------------------------------------

    @contextlib.contextmanager
    def _borrow(self) -> Iterator[psycopg.Connection[Any]]:
        if self._connection is not None:
            with self._connection_lock:
                conn = self._connection
                if conn.closed:
                    raise CoderAgentError("the connection given to the durable store is closed")
                if conn.info.transaction_status != TransactionStatus.IDLE:
                    raise _busy_connection()
                yield conn
        else:
            assert self._pool is not None
            with self._pool.connection(timeout=self._timeout) as conn:
                yield conn

    def _execute(self, program: _Program[T]) -> T:
        with self._borrow() as conn, conn.transaction(), conn.cursor() as cursor:
            try:
                query = next(program)
                while True:
                    cursor.execute(query.statement, query.params)
                    rows = cursor.fetchall() if cursor.description is not None else []
                    query = program.send(rows)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]

    def _prepare(self) -> None:
        with self._lock:
            self._check_open()
            if self._ready:
                return
            if self._owns_pool and self._pool is not None:
                self._pool.open()  # connects in the background; a call waits up to timeout
            self._execute(_migrate(self._statements))
            self._ready = True

    def _run(self, program: Callable[..., _Program[T]], *args: Any) -> T:
        self._check_open()
        if not self._ready:
            self._prepare()
        return self._execute(program(self._statements, *args))

    # -- the store protocol ------------------------------------------------------------------

    def get_checkpoint(self, tenant: str, workflow_id: str) -> Checkpoint | None:
        return self._run(_get_checkpoint, tenant, workflow_id)

    def put_checkpoint(self, tenant: str, workflow_id: str, checkpoint: Checkpoint) -> None:
        self._run(_put_checkpoint, tenant, workflow_id, checkpoint)

    def delete_checkpoint(self, tenant: str, workflow_id: str) -> None:
        self._run(_delete_checkpoint, tenant, workflow_id)

    def checkpointed_chat_ids(self, tenant: str | None = None) -> frozenset[str]:
        return self._run(_checkpointed_chat_ids, tenant)

    def get_ledger(self, tenant: str, chat_id: str, tool_call_id: str) -> LedgerEntry | None:
        return self._run(_get_ledger, tenant, chat_id, tool_call_id)

    def put_ledger(self, tenant: str, chat_id: str, tool_call_id: str, entry: LedgerEntry) -> None:
        self._run(_put_ledger, tenant, chat_id, tool_call_id, entry)

    def get_journal(self, tenant: str, chat_id: str) -> JournalEntry | None:
        return self._run(_get_journal, tenant, chat_id)

    def put_journal(self, tenant: str, chat_id: str, entry: JournalEntry) -> None:
        self._run(_put_journal, tenant, chat_id, entry)

    def add_stranded(self, tenant: str, workflow_id: str, chat_id: str) -> None:
        self._run(_add_stranded, tenant, workflow_id, chat_id)

    def stranded_chats(self, tenant: str | None = None) -> tuple[StrandedChat, ...]:
        return self._run(_stranded_chats, tenant)

    def remove_stranded(self, tenant: str, chat_id: str) -> None:
        self._run(_remove_stranded, tenant, chat_id)

    def forget_chat(self, tenant: str, chat_id: str) -> None:
        self._run(_forget_chat, tenant, chat_id)

    def acquire_lease(
        self, tenant: str, workflow_id: str, owner: str, now: float, duration: float
    ) -> Lease:
        return self._run(_acquire_lease, tenant, workflow_id, owner, now, duration)

    def renew_lease(
        self, tenant: str, workflow_id: str, owner: str, now: float, duration: float
    ) -> bool:
        return self._run(_renew_lease, tenant, workflow_id, owner, now, duration)

    def release_lease(self, tenant: str, workflow_id: str, owner: str) -> None:
        self._run(_release_lease, tenant, workflow_id, owner)

    def get_lease(self, tenant: str, workflow_id: str) -> Lease | None:
        return self._run(_get_lease, tenant, workflow_id)


# -- the asyncio store ------------------------------------------------------------------------


class AsyncPostgresStore(_Base):
    """An ``AsyncDurableStore`` in PostgreSQL on psycopg's asyncio driver (see the module
    docstring): ``AsyncPostgresStore(conninfo)`` owns a pool of up to ``max_size``
    connections; ``pool=`` borrows from an open ``psycopg_pool.AsyncConnectionPool``;
    ``connection=`` uses one ``psycopg.AsyncConnection``. ``timeout`` is how long a call
    waits for a connection, in seconds. Use it from one event loop; ``aclose()`` it there."""

    _kind = "AsyncPostgresStore"

    def __init__(
        self,
        conninfo: str | None = None,
        *,
        pool: AsyncConnectionPool[Any] | None = None,
        connection: psycopg.AsyncConnection[Any] | None = None,
        schema: str = DEFAULT_SCHEMA,
        max_size: int = 4,
        timeout: float = 30.0,
    ) -> None:
        super().__init__(schema, max_size, timeout)
        _one_source(conninfo, pool, connection)
        self._lock = asyncio.Lock()
        self._connection_lock = asyncio.Lock()
        self._connection = connection
        self._owns_pool = conninfo is not None
        self._conninfo = conninfo
        if conninfo is not None:
            self._parameters = conninfo_to_dict(conninfo)
        elif pool is not None:
            if not isinstance(pool, AsyncConnectionPool):
                raise CoderAgentError("pool= must be a psycopg_pool.AsyncConnectionPool")
            self._parameters = _pool_parameters(pool.conninfo)
        else:
            if not isinstance(connection, psycopg.AsyncConnection):
                raise CoderAgentError("connection= must be a psycopg.AsyncConnection")
            self._parameters = {} if connection.closed else connection.info.get_parameters()
        self._pool = pool

    async def aclose(self) -> None:
        """Close the pool the store owns (idempotent); a pool or connection you gave it stays
        open. Calls after ``aclose()`` raise ``CoderAgentError``."""
        async with self._lock:
            self._closed = True
            if self._owns_pool and self._pool is not None:
                await self._pool.close()

    async def __aenter__(self) -> AsyncPostgresStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- plumbing ----------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def _borrow(self) -> AsyncIterator[psycopg.AsyncConnection[Any]]:
        if self._connection is not None:
            async with self._connection_lock:
                conn = self._connection
                if conn.closed:
                    raise CoderAgentError("the connection given to the durable store is closed")
                if conn.info.transaction_status != TransactionStatus.IDLE:
                    raise _busy_connection()
                yield conn
        else:
            assert self._pool is not None
            async with self._pool.connection(timeout=self._timeout) as conn:
                yield conn

    async def _execute(self, program: _Program[T]) -> T:
        async with self._borrow() as conn, conn.transaction(), conn.cursor() as cursor:
            try:
                query = next(program)
                while True:
                    await cursor.execute(query.statement, query.params)
                    rows = await cursor.fetchall() if cursor.description is not None else []
                    query = program.send(rows)
            except StopIteration as stop:
                return stop.value  # type: ignore[no-any-return]

    async def _prepare(self) -> None:
        async with self._lock:
            self._check_open()
            if self._ready:
                return
            if self._owns_pool and self._pool is None:
                assert self._conninfo is not None
                self._pool = AsyncConnectionPool(
                    self._conninfo,
                    min_size=1,
                    max_size=self._max_size,
                    open=False,
                    kwargs={"autocommit": True},
                    check=AsyncConnectionPool.check_connection,
                    name=f"coder-durable-{self.schema}",
                )
                await self._pool.open()
            await self._execute(_migrate(self._statements))
            self._ready = True

    async def _run(self, program: Callable[..., _Program[T]], *args: Any) -> T:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            raise CoderAgentError(
                "AsyncPostgresStore runs on asyncio (psycopg's async connections need it); "
                "on another runtime use PostgresStore, whose calls run in worker threads"
            ) from None
        self._check_open()
        if not self._ready:
            await self._prepare()
        return await self._execute(program(self._statements, *args))

    # -- the store protocol ------------------------------------------------------------------

    async def get_checkpoint(self, tenant: str, workflow_id: str) -> Checkpoint | None:
        return await self._run(_get_checkpoint, tenant, workflow_id)

    async def put_checkpoint(self, tenant: str, workflow_id: str, checkpoint: Checkpoint) -> None:
        await self._run(_put_checkpoint, tenant, workflow_id, checkpoint)

    async def delete_checkpoint(self, tenant: str, workflow_id: str) -> None:
        await self._run(_delete_checkpoint, tenant, workflow_id)

    async def checkpointed_chat_ids(self, tenant: str | None = None) -> frozenset[str]:
        return await self._run(_checkpointed_chat_ids, tenant)

    async def get_ledger(
        self, tenant: str, chat_id: str, tool_call_id: str
    ) -> LedgerEntry | None:
        return await self._run(_get_ledger, tenant, chat_id, tool_call_id)

    async def put_ledger(
        self, tenant: str, chat_id: str, tool_call_id: str, entry: LedgerEntry
    ) -> None:
        await self._run(_put_ledger, tenant, chat_id, tool_call_id, entry)

    async def get_journal(self, tenant: str, chat_id: str) -> JournalEntry | None:
        return await self._run(_get_journal, tenant, chat_id)

    async def put_journal(self, tenant: str, chat_id: str, entry: JournalEntry) -> None:
        await self._run(_put_journal, tenant, chat_id, entry)

    async def add_stranded(self, tenant: str, workflow_id: str, chat_id: str) -> None:
        await self._run(_add_stranded, tenant, workflow_id, chat_id)

    async def stranded_chats(self, tenant: str | None = None) -> tuple[StrandedChat, ...]:
        return await self._run(_stranded_chats, tenant)

    async def remove_stranded(self, tenant: str, chat_id: str) -> None:
        await self._run(_remove_stranded, tenant, chat_id)

    async def forget_chat(self, tenant: str, chat_id: str) -> None:
        await self._run(_forget_chat, tenant, chat_id)

    async def acquire_lease(
        self, tenant: str, workflow_id: str, owner: str, now: float, duration: float
    ) -> Lease:
        return await self._run(_acquire_lease, tenant, workflow_id, owner, now, duration)

    async def renew_lease(
        self, tenant: str, workflow_id: str, owner: str, now: float, duration: float
    ) -> bool:
        return await self._run(_renew_lease, tenant, workflow_id, owner, now, duration)

    async def release_lease(self, tenant: str, workflow_id: str, owner: str) -> None:
        await self._run(_release_lease, tenant, workflow_id, owner)

    async def get_lease(self, tenant: str, workflow_id: str) -> Lease | None:
        return await self._run(_get_lease, tenant, workflow_id)
