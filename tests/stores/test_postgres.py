"""What only the PostgreSQL stores do: the schema created on first use and versioned (an older
layout migrated, a newer one refused, workers starting together migrate once, a role without
CREATE rights works on a current layout), the three ways to give them connections, secrets
kept out of reprs, errors and logs, malformed rows, closing, and the test server itself."""

from __future__ import annotations

import asyncio
import logging
import os
import pathlib
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import psycopg
import pytest
import trio
from psycopg import sql
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from coder_io_common.stores import AsyncPostgresStore, PostgresStore
from coder_io_common.stores.postgres import DEFAULT_SCHEMA, MIGRATIONS, SCHEMA_VERSION
from coder_proto._errors import CoderAgentError
from coder_proto.durable import Checkpoint, DurableStoreError, LedgerEntry
from tests import postgres_server as postgres_server_module
from tests.postgres_server import BIN_ENV, PostgresServer, ServerUnavailable, find_bin_dir

CP = Checkpoint(chat_id="c1", last_seen_message_id=4)
T = TypeVar("T")


def tables(server: PostgresServer, schema: str) -> set[str]:
    with server.admin() as conn:
        rows = conn.execute(
            "SELECT tablename FROM pg_catalog.pg_tables WHERE schemaname = %s", (schema,)
        ).fetchall()
    return {row[0] for row in rows}


def versions(server: PostgresServer, schema: str) -> list[int]:
    with server.admin() as conn:
        rows = conn.execute(
            sql.SQL("SELECT version FROM {}.schema_version ORDER BY version").format(
                sql.Identifier(schema)
            )
        ).fetchall()
    return [row[0] for row in rows]


def run_async(coro: Any) -> Any:
    return asyncio.run(coro)


# -- the schema ---------------------------------------------------------------------------------


def test_the_schema_is_created_on_first_use(postgres_server: PostgresServer, pg_schema: str) -> None:
    store = PostgresStore(postgres_server.conninfo(), schema=pg_schema)
    try:
        assert tables(postgres_server, pg_schema) == set()  # constructing connects nowhere
        assert store.get_checkpoint("t", "wf") is None
        assert tables(postgres_server, pg_schema) == {
            "schema_version",
            "checkpoints",
            "ledger",
            "journal",
            "stranded",
            "leases",
            "lease_fences",
        }
        assert versions(postgres_server, pg_schema) == [1, 2, 3] and SCHEMA_VERSION == 3
    finally:
        store.close()
    # Another store on the current layout changes nothing.
    with PostgresStore(postgres_server.conninfo(), schema=pg_schema) as again:
        again.put_checkpoint("t", "wf", CP)
    assert versions(postgres_server, pg_schema) == [1, 2, 3]


def test_the_default_schema_is_coder_durable(postgres_server: PostgresServer) -> None:
    try:
        with PostgresStore(postgres_server.conninfo()) as store:
            assert store.schema == DEFAULT_SCHEMA == "coder_durable"
            store.put_checkpoint("t", "wf", CP)
        assert "checkpoints" in tables(postgres_server, "coder_durable")
    finally:
        postgres_server.drop_schema("coder_durable")


def make_first_version(server: PostgresServer, schema: str) -> None:
    """A schema as the first layout left it, with a record in it."""
    ident = sql.Identifier(schema)
    with server.admin() as conn, conn.transaction():
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(ident))
        conn.execute(
            sql.SQL("CREATE TABLE {}.schema_version (version integer PRIMARY KEY, "
                    "applied_at timestamptz NOT NULL DEFAULT now())").format(ident)
        )
        for statement in MIGRATIONS[0]:
            conn.execute(sql.SQL(statement).format(s=ident))
        conn.execute(sql.SQL("INSERT INTO {}.schema_version (version) VALUES (1)").format(ident))
        conn.execute(
            sql.SQL("INSERT INTO {}.checkpoints VALUES ('t', 'wf', 'c1', %s)").format(ident),
            ('{"chat_id": "c1", "outcome": "finished", "last_seen_message_id": 4}',),
        )


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_an_older_layout_is_migrated_and_keeps_its_records(
    postgres_server: PostgresServer, pg_schema: str, driver: str
) -> None:
    make_first_version(postgres_server, pg_schema)
    assert "leases" not in tables(postgres_server, pg_schema)
    if driver == "sync":
        with PostgresStore(postgres_server.conninfo(), schema=pg_schema) as store:
            assert store.get_checkpoint("t", "wf") == CP
            assert store.acquire_lease("t", "wf", "me", 1.0, 60.0).owner == "me"
    else:

        async def scenario() -> None:
            async with AsyncPostgresStore(postgres_server.conninfo(), schema=pg_schema) as store:
                assert await store.get_checkpoint("t", "wf") == CP
                assert (await store.acquire_lease("t", "wf", "me", 1.0, 60.0)).owner == "me"

        run_async(scenario())
    assert versions(postgres_server, pg_schema) == [1, 2, 3]
    assert {"leases", "lease_fences"} <= tables(postgres_server, pg_schema)


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_second_version_layout_gets_lease_counters_d37(
    postgres_server: PostgresServer, pg_schema: str, driver: str
) -> None:
    """A schema written before fencing tokens existed (version 2), with a lease held in it:
    the lease reads with no token, the next acquisition takes number 1."""
    make_first_version(postgres_server, pg_schema)
    ident = sql.Identifier(pg_schema)
    with postgres_server.admin() as conn, conn.transaction():
        for statement in MIGRATIONS[1]:
            conn.execute(sql.SQL(statement).format(s=ident))
        conn.execute(sql.SQL("INSERT INTO {}.schema_version (version) VALUES (2)").format(ident))
        conn.execute(
            sql.SQL("INSERT INTO {}.leases VALUES ('t', 'wf', 'old-worker', 100.0)").format(ident)
        )

    async def scenario(store: Any) -> list[Any]:
        held = await store.get_lease("t", "wf")
        taken = await store.acquire_lease("t", "wf", "new", 100.0, 60.0)
        return [await store.get_checkpoint("t", "wf"), held, taken]

    if driver == "sync":
        with PostgresStore(postgres_server.conninfo(), schema=pg_schema) as store:
            cp, held, taken = (
                store.get_checkpoint("t", "wf"),
                store.get_lease("t", "wf"),
                store.acquire_lease("t", "wf", "new", 100.0, 60.0),
            )
    else:

        async def run() -> list[Any]:
            async with AsyncPostgresStore(postgres_server.conninfo(), schema=pg_schema) as store:
                return await scenario(store)

        cp, held, taken = run_async(run())
    assert cp == CP
    assert (held.owner, held.fencing_token) == ("old-worker", None)
    assert (taken.owner, taken.fencing_token) == ("new", 1)
    assert versions(postgres_server, pg_schema) == [1, 2, 3]


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_newer_layout_is_refused_untouched(
    postgres_server: PostgresServer, pg_schema: str, driver: str
) -> None:
    with PostgresStore(postgres_server.conninfo(), schema=pg_schema) as store:
        store.put_checkpoint("t", "wf", CP)
    with postgres_server.admin() as conn:
        conn.execute(
            sql.SQL("INSERT INTO {}.schema_version (version) VALUES (4)").format(
                sql.Identifier(pg_schema)
            )
        )
    message = f"schema '{pg_schema}' holds durable-store schema version 4, newer than the version 3"
    if driver == "sync":
        with PostgresStore(postgres_server.conninfo(), schema=pg_schema) as newer:
            with pytest.raises(DurableStoreError, match=message):
                newer.get_checkpoint("t", "wf")
            with pytest.raises(DurableStoreError, match="upgrade coder-agents"):
                newer.put_checkpoint("t", "wf", Checkpoint(chat_id="c2"))
    else:

        async def scenario() -> None:
            async with AsyncPostgresStore(postgres_server.conninfo(), schema=pg_schema) as newer:
                with pytest.raises(DurableStoreError, match=message):
                    await newer.get_checkpoint("t", "wf")

        run_async(scenario())
    assert versions(postgres_server, pg_schema) == [1, 2, 3, 4]
    with postgres_server.admin() as conn:
        (record,) = conn.execute(
            sql.SQL("SELECT record FROM {}.checkpoints").format(sql.Identifier(pg_schema))
        ).fetchone() or (None,)
    assert record is not None and '"c1"' in record


def test_workers_starting_together_create_the_schema_once(
    postgres_server: PostgresServer, pg_schema: str
) -> None:
    stores = [PostgresStore(postgres_server.conninfo(), schema=pg_schema) for _ in range(8)]
    barrier = threading.Barrier(len(stores))
    errors: list[BaseException] = []

    def first_call(index: int) -> None:
        try:
            barrier.wait(30)
            stores[index].put_checkpoint("t", f"wf-{index}", Checkpoint(chat_id=f"c{index}"))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=first_call, args=(i,)) for i in range(len(stores))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    for store in stores:
        store.close()
    assert not errors, errors
    assert versions(postgres_server, pg_schema) == [1, 2, 3]
    with PostgresStore(postgres_server.conninfo(), schema=pg_schema) as store:
        assert len(store.checkpointed_chat_ids("t")) == len(stores)


def test_a_role_without_create_rights_works_on_a_current_layout(
    postgres_server: PostgresServer, pg_schema: str
) -> None:
    """Deployments often run workers with a role that may read and write rows but not
    create schemas: the layout is made once by an owner, then the workers use it."""
    role, password = f"worker_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex
    ident, role_ident = sql.Identifier(pg_schema), sql.Identifier(role)
    with postgres_server.admin() as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN PASSWORD {}").format(role_ident, password))
    worker_conninfo = postgres_server.conninfo(user=role, password=password)
    try:
        with PostgresStore(worker_conninfo, schema=pg_schema) as worker:
            with pytest.raises(psycopg.errors.InsufficientPrivilege):
                worker.get_checkpoint("t", "wf")  # it may not create the schema
        with PostgresStore(postgres_server.conninfo(), schema=pg_schema) as owner:
            owner.get_checkpoint("t", "wf")
        with postgres_server.admin() as conn:
            conn.execute(sql.SQL("GRANT USAGE ON SCHEMA {} TO {}").format(ident, role_ident))
            conn.execute(
                sql.SQL(
                    "GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {} TO {}"
                ).format(ident, role_ident)
            )
        with PostgresStore(worker_conninfo, schema=pg_schema) as worker:
            worker.put_checkpoint("t", "wf", CP)
            worker.add_stranded("t", "wf", "s1")
            assert worker.acquire_lease("t", "wf", "w", 1.0, 60.0).owner == "w"
            assert worker.get_checkpoint("t", "wf") == CP
    finally:
        with postgres_server.admin() as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(role_ident))
            conn.execute(sql.SQL("DROP ROLE {}").format(role_ident))


def test_a_database_that_is_not_utf8_is_refused(postgres_server: PostgresServer) -> None:
    name = f"ascii_{uuid.uuid4().hex[:8]}"
    with postgres_server.admin() as conn:
        conn.execute(
            sql.SQL(
                "CREATE DATABASE {} ENCODING 'SQL_ASCII' TEMPLATE template0 LC_COLLATE 'C' "
                "LC_CTYPE 'C'"
            ).format(sql.Identifier(name))
        )
    try:
        with PostgresStore(postgres_server.conninfo(dbname=name)) as store:
            with pytest.raises(DurableStoreError, match="needs a UTF8 database"):
                store.get_checkpoint("t", "wf")
    finally:
        with postgres_server.admin() as conn:
            conn.execute(sql.SQL("DROP DATABASE {}").format(sql.Identifier(name)))


def test_a_schema_holding_other_tables_of_the_same_names_is_not_clobbered(
    postgres_server: PostgresServer, pg_schema: str
) -> None:
    with postgres_server.admin() as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(pg_schema)))
        conn.execute(
            sql.SQL("CREATE TABLE {}.checkpoints (mine integer)").format(sql.Identifier(pg_schema))
        )
    with PostgresStore(postgres_server.conninfo(), schema=pg_schema) as store:
        with pytest.raises(psycopg.errors.DuplicateTable):
            store.get_checkpoint("t", "wf")
    # The failed migration left nothing behind (one transaction).
    assert tables(postgres_server, pg_schema) == {"checkpoints"}


# -- connections ----------------------------------------------------------------------------------


def test_a_pool_of_yours_is_borrowed_and_left_open(
    postgres_server: PostgresServer, pg_schema: str
) -> None:
    with ConnectionPool(postgres_server.conninfo(), min_size=1, max_size=2, open=True) as pool:
        store = PostgresStore(pool=pool, schema=pg_schema)
        store.put_checkpoint("t", "wf", CP)
        assert store.get_checkpoint("t", "wf") == CP
        store.close()
        assert not pool.closed
        with pool.connection() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
        with pytest.raises(CoderAgentError, match="this PostgresStore is closed"):
            store.get_checkpoint("t", "wf")


def test_a_connection_of_yours_is_used_between_your_transactions(
    postgres_server: PostgresServer, pg_schema: str
) -> None:
    with psycopg.connect(postgres_server.conninfo()) as conn:  # not autocommit
        store = PostgresStore(connection=conn, schema=pg_schema)
        store.put_checkpoint("t", "wf", CP)
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE  # committed
        # Durable when the call returns: another connection sees it.
        with PostgresStore(postgres_server.conninfo(), schema=pg_schema) as other:
            assert other.get_checkpoint("t", "wf") == CP
        conn.execute("SELECT 1")  # the caller opens a transaction of its own
        with pytest.raises(CoderAgentError, match="inside a transaction"):
            store.put_checkpoint("t", "wf", Checkpoint(chat_id="c2"))
        conn.rollback()
        assert store.get_checkpoint("t", "wf") == CP
        store.close()
        assert not conn.closed
    with pytest.raises(CoderAgentError, match="closed"):
        PostgresStore(connection=conn, schema=pg_schema).get_checkpoint("t", "wf")


def test_async_pools_and_connections_of_yours(
    postgres_server: PostgresServer, pg_schema: str
) -> None:
    async def scenario() -> None:
        async with AsyncConnectionPool(
            postgres_server.conninfo(), min_size=1, max_size=2, open=False
        ) as pool:
            store = AsyncPostgresStore(pool=pool, schema=pg_schema)
            await store.put_checkpoint("t", "wf", CP)
            await store.aclose()
            assert not pool.closed
        conn = await psycopg.AsyncConnection.connect(postgres_server.conninfo())
        try:
            store = AsyncPostgresStore(connection=conn, schema=pg_schema)
            assert await store.get_checkpoint("t", "wf") == CP
            assert repr(store).startswith(f"AsyncPostgresStore(schema='{pg_schema}'")
            await conn.execute("SELECT 1")
            with pytest.raises(CoderAgentError, match="inside a transaction"):
                await store.get_checkpoint("t", "wf")
            await conn.rollback()
            # Concurrent calls take turns on the one connection.
            await asyncio.gather(
                *(store.put_ledger("t", "c", f"x{i}", LedgerEntry.done(i)) for i in range(10))
            )
            assert await store.get_ledger("t", "c", "x9") == LedgerEntry.done(9)
            await store.aclose()
            with pytest.raises(CoderAgentError, match="closed"):
                await store.get_checkpoint("t", "wf")
        finally:
            await conn.close()

    run_async(scenario())


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({}, "exactly one of"),
        ({"conninfo": "host=x", "pool": "p"}, "exactly one of"),
        ({"conninfo": 5}, "connection string"),
        ({"pool": "a pool"}, "pool= must be"),
        ({"connection": "a connection"}, "connection= must be"),
        ({"conninfo": "host=x", "schema": ""}, "schema"),
        ({"conninfo": "host=x", "schema": "s" * 64}, "63 bytes"),
        ({"conninfo": "host=x", "max_size": 0}, "max_size"),
        ({"conninfo": "host=x", "timeout": 0}, "timeout"),
        ({"conninfo": "host=x", "timeout": True}, "timeout"),
    ],
)
@pytest.mark.parametrize("cls", [PostgresStore, AsyncPostgresStore])
def test_bad_settings_are_refused_at_construction(
    cls: type, kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(CoderAgentError, match=match):
        cls(**kwargs)


# -- secrets ------------------------------------------------------------------------------------


def test_no_password_in_reprs_errors_or_logs(
    postgres_server: PostgresServer, pg_schema: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    secret = postgres_server.password
    wrong = f"wrong-{uuid.uuid4().hex}"
    texts: list[str] = []
    with PostgresStore(postgres_server.conninfo(), schema=pg_schema) as store:
        store.put_checkpoint("t", "wf", CP)
        texts.append(repr(store))
        assert f"host='{postgres_server.host}'" in repr(store)
        assert f"port='{postgres_server.port}'" in repr(store)
    with ConnectionPool(postgres_server.conninfo(), min_size=1, open=True) as pool:
        texts.append(repr(PostgresStore(pool=pool, schema=pg_schema)))
    with psycopg.connect(postgres_server.conninfo()) as conn:
        texts.append(repr(PostgresStore(connection=conn, schema=pg_schema)))
    texts.append(repr(AsyncPostgresStore(postgres_server.conninfo(), schema=pg_schema)))
    # A bad connection string is refused without quoting it.
    with pytest.raises(CoderAgentError) as bad:
        PostgresStore(f"host=x password={wrong} =oops")
    texts.append(str(bad.value))
    assert bad.value.__cause__ is None and bad.value.__context__ is None
    # A wrong password: the failure names the user, never the password tried.
    failing = PostgresStore(postgres_server.conninfo(password=wrong), schema=pg_schema, timeout=1)
    with pytest.raises(Exception) as refused:
        failing.get_checkpoint("t", "wf")
    failing.close()
    texts += [str(refused.value), repr(refused.value), repr(failing)]
    texts += [r.getMessage() for r in caplog.records]
    assert any("password authentication failed" in t for t in texts)
    for text in texts:
        assert secret not in text and wrong not in text, text


# -- malformed rows, closing ---------------------------------------------------------------------


def test_malformed_rows_are_store_errors(postgres_server: PostgresServer, pg_schema: str) -> None:
    with PostgresStore(postgres_server.conninfo(), schema=pg_schema) as store:
        store.get_checkpoint("t", "wf")
        ident = sql.Identifier(pg_schema)
        with postgres_server.admin() as conn:
            conn.execute(
                sql.SQL("INSERT INTO {}.ledger VALUES ('t', 'c', 'x', 'not json')").format(ident)
            )
            conn.execute(
                sql.SQL("INSERT INTO {}.checkpoints VALUES ('t', 'wf', 'c', '[]')").format(ident)
            )
            conn.execute(sql.SQL("INSERT INTO {}.leases VALUES ('t', 'wf', '', 5)").format(ident))
        with pytest.raises(DurableStoreError, match="malformed ledger"):
            store.get_ledger("t", "c", "x")
        with pytest.raises(DurableStoreError, match="malformed checkpoint"):
            store.get_checkpoint("t", "wf")
        with pytest.raises(DurableStoreError, match="malformed lease record"):
            store.get_lease("t", "wf")


def test_a_closed_store_refuses_calls(postgres_server: PostgresServer, pg_schema: str) -> None:
    store = PostgresStore(postgres_server.conninfo(), schema=pg_schema)
    store.close()
    store.close()
    with pytest.raises(CoderAgentError, match="this PostgresStore is closed"):
        store.put_checkpoint("t", "wf", CP)

    async def scenario() -> None:
        async_store = AsyncPostgresStore(postgres_server.conninfo(), schema=pg_schema)
        await async_store.get_checkpoint("t", "wf")
        await async_store.aclose()
        await async_store.aclose()
        with pytest.raises(CoderAgentError, match="this AsyncPostgresStore is closed"):
            await async_store.get_checkpoint("t", "wf")

    run_async(scenario())


def test_the_async_store_says_it_needs_asyncio_when_run_on_trio(
    postgres_server: PostgresServer, pg_schema: str
) -> None:
    store = AsyncPostgresStore(postgres_server.conninfo(), schema=pg_schema)

    async def on_trio() -> None:
        with pytest.raises(CoderAgentError, match=r"runs on asyncio.*use PostgresStore"):
            await store.get_checkpoint("t", "wf")

    trio.run(on_trio)
    assert tables(postgres_server, pg_schema) == set()


# -- the test server --------------------------------------------------------------------------------


def server_process_uid(server: PostgresServer) -> int:
    assert server.base_dir is not None
    pid = int((server.data_dir / "postmaster.pid").read_text().split()[0])
    status = pathlib.Path(f"/proc/{pid}/status").read_text()
    (line,) = [x for x in status.splitlines() if x.startswith("Uid:")]
    return int(line.split()[1])


def test_the_test_server_listens_on_loopback_only_with_its_socket_in_its_directory(
    postgres_server: PostgresServer,
) -> None:
    assert postgres_server.version.startswith(("15", "16", "17", "18"))
    with postgres_server.admin() as conn:
        settings = dict(
            conn.execute(
                "SELECT name, setting FROM pg_settings WHERE name IN "
                "('listen_addresses', 'unix_socket_directories', 'port')"
            ).fetchall()
        )
    assert settings["listen_addresses"] == "127.0.0.1"
    assert settings["unix_socket_directories"] == str(postgres_server.socket_dir)
    assert int(settings["port"]) == postgres_server.port
    assert postgres_server.socket_dir.parent == postgres_server.base_dir
    assert (postgres_server.socket_dir / f".s.PGSQL.{postgres_server.port}").exists()
    # The server refuses root: under root it runs as the postgres user.
    uid = server_process_uid(postgres_server)
    assert uid != 0 and (os.geteuid() == 0 or uid == os.geteuid())


@pytest.fixture
def second_server() -> Iterator[PostgresServer]:
    server = PostgresServer()
    try:
        yield server
    finally:
        server.stop()


def test_two_test_servers_run_side_by_side(
    postgres_server: PostgresServer, second_server: PostgresServer
) -> None:
    """Another engineer's run on the same machine: its own port, directory and socket."""
    second_server.start()
    assert second_server.port != postgres_server.port
    assert second_server.base_dir != postgres_server.base_dir
    for server in (postgres_server, second_server):
        with server.admin() as conn:
            assert conn.execute("SELECT 1").fetchone() == (1,)
    base = second_server.base_dir
    assert base is not None and base.exists()
    second_server.stop()
    assert not base.exists() and not second_server.running
    with postgres_server.admin() as conn:  # the first one is untouched
        assert conn.execute("SELECT 1").fetchone() == (1,)


def eventually(call: Callable[[], T], within: float = 90.0) -> T:
    """``call()`` until it stops timing out waiting for a connection: the pool reconnects in
    the background with a growing back-off after failed attempts."""
    deadline = time.monotonic() + within
    while True:
        try:
            return call()
        except PoolTimeout:
            if time.monotonic() > deadline:
                raise


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_the_first_call_after_a_database_restart_succeeds(
    second_server: PostgresServer, driver: str
) -> None:
    """Pooled connections die with the server; the store replaces a dead idle connection
    before using it, so a restart between two calls is never reported as a failed write."""
    second_server.start()
    conninfo = second_server.conninfo(connect_timeout=5)
    if driver == "sync":
        with PostgresStore(conninfo, schema="restart", timeout=30) as store:
            store.put_checkpoint("t", "wf", CP)
            second_server.shut_down()
            second_server.start_again()
            store.put_ledger("t", "c1", "x", LedgerEntry.done(1))
            assert store.get_checkpoint("t", "wf") == CP
        return

    async def scenario() -> None:
        async with AsyncPostgresStore(conninfo, schema="restart", timeout=30) as store:
            await store.put_checkpoint("t", "wf", CP)
            second_server.shut_down()
            second_server.start_again()
            await store.put_ledger("t", "c1", "x", LedgerEntry.done(1))
            assert await store.get_checkpoint("t", "wf") == CP

    run_async(scenario())


@pytest.mark.parametrize("driver", ["sync", "async"])
def test_calls_while_the_database_is_down_fail_and_later_calls_work(
    second_server: PostgresServer, driver: str
) -> None:
    """A call while the database is down fails after the store's timeout; the store is not
    broken by it: once the database is back, calls work again."""
    second_server.start()
    conninfo = second_server.conninfo(connect_timeout=5)
    if driver == "sync":
        with PostgresStore(conninfo, schema="outage", timeout=1) as store:
            store.put_checkpoint("t", "wf", CP)
            second_server.shut_down()
            with pytest.raises(PoolTimeout, match="couldn't get a connection"):
                store.get_checkpoint("t", "wf")
            second_server.start_again()
            assert eventually(lambda: store.get_checkpoint("t", "wf")) == CP
        return

    async def scenario() -> None:
        async with AsyncPostgresStore(conninfo, schema="outage", timeout=1) as store:
            await store.put_checkpoint("t", "wf", CP)
            second_server.shut_down()
            with pytest.raises(PoolTimeout, match="couldn't get a connection"):
                await store.get_checkpoint("t", "wf")
            second_server.start_again()
            deadline = time.monotonic() + 90.0
            while True:
                try:
                    assert await store.get_checkpoint("t", "wf") == CP
                    break
                except PoolTimeout:
                    assert time.monotonic() < deadline

    run_async(scenario())


def test_a_store_opened_while_the_database_is_down_works_once_it_is_up(
    second_server: PostgresServer,
) -> None:
    second_server.start()
    second_server.shut_down()
    with PostgresStore(second_server.conninfo(connect_timeout=5), timeout=1) as store:
        with pytest.raises(PoolTimeout, match="couldn't get a connection"):
            store.get_checkpoint("t", "wf")
        second_server.start_again()
        eventually(lambda: store.put_checkpoint("t", "wf", CP))
        assert store.get_checkpoint("t", "wf") == CP


def test_a_missing_server_fails_the_tests_that_need_it_never_skips(
    tmp_path: pathlib.Path,
) -> None:
    """No server binaries: every test that needs the server errors with what to do."""
    root = pathlib.Path(__file__).resolve().parents[2]
    test = "tests/stores/test_postgres.py::test_malformed_rows_are_store_errors"
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--no-cov", test],
        cwd=root,
        env={**os.environ, BIN_ENV: str(tmp_path)},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 1, done.stdout
    assert "1 error" in done.stdout and "skipped" not in done.stdout
    assert "the PostgreSQL test server is unavailable" in done.stdout
    assert f"{BIN_ENV}={tmp_path} holds no initdb" in done.stdout


def test_without_binaries_or_the_postgres_user_the_server_says_what_to_do(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv(BIN_ENV, raising=False)
    monkeypatch.setattr(postgres_server_module, "BIN_GLOB", "/nonexistent/*/bin")
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(ServerUnavailable, match="apt-get install postgresql"):
        find_bin_dir()
    monkeypatch.setattr(os, "geteuid", lambda: 0)

    def no_such_user(name: str) -> Any:
        raise KeyError(name)

    monkeypatch.setattr(postgres_server_module.pwd, "getpwnam", no_such_user)
    with pytest.raises(ServerUnavailable, match="needs the 'postgres' system user"):
        PostgresServer()._run_as_server_user()
