"""The stores the conformance suite runs on, and how a test or a child process opens one:
``MemoryStore``, ``SQLiteStore``, ``PostgresStore`` and ``AsyncPostgresStore`` (driven from
plain test code on an event loop of its own)."""

from __future__ import annotations

import asyncio
import inspect
import pathlib
from collections.abc import Callable
from typing import Any

import pytest

from coder_io_common.stores import AsyncPostgresStore, PostgresStore, SQLiteStore
from coder_proto.durable import MemoryStore
from tests.postgres_server import PostgresServer

#: Every store the suite runs on.
KINDS = ("memory", "sqlite", "postgres", "postgres_async")
#: The stores that several processes can share.
SHARED_KINDS = ("sqlite", "postgres", "postgres_async")


class Blocking:
    """An ``AsyncDurableStore`` called from plain test code: each coroutine method runs to
    completion on ``runner``'s event loop."""

    def __init__(self, store: Any, runner: asyncio.Runner) -> None:
        self.inner = store
        self.runner = runner

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not inspect.iscoroutinefunction(attr):
            return attr

        def call(*args: Any) -> Any:
            return self.runner.run(attr(*args))

        return call

    def __repr__(self) -> str:
        return repr(self.inner)


class StoreMaker:
    """Opens stores of one kind on one set of data: ``open()`` gives another store object on
    the same records (another worker's view), ``spec`` says the same for a child process."""

    def __init__(
        self,
        kind: str,
        tmp_path: pathlib.Path,
        request: pytest.FixtureRequest,
    ) -> None:
        self.kind = kind
        self.spec: tuple[str, ...] = (kind,)
        self._opened: list[Callable[[], None]] = []
        self._runner: asyncio.Runner | None = None
        self._memory: MemoryStore | None = None
        if kind == "sqlite":
            self.spec = (kind, str(tmp_path / "durable.sqlite3"))
        elif kind.startswith("postgres"):
            server: PostgresServer = request.getfixturevalue("postgres_server")
            schema: str = request.getfixturevalue("pg_schema")
            self.spec = (kind, server.conninfo(), schema)

    @property
    def runner(self) -> asyncio.Runner:
        if self._runner is None:
            self._runner = asyncio.Runner()
        return self._runner

    def open(self) -> Any:
        """A store object (plain methods; an async store is wrapped in ``Blocking``)."""
        if self.kind == "memory":
            if self._memory is None:
                self._memory = MemoryStore()
            return self._memory
        if self.kind == "sqlite":
            sqlite_store = SQLiteStore(self.spec[1])
            self._opened.append(sqlite_store.close)
            return sqlite_store
        if self.kind == "postgres":
            pg_store = PostgresStore(self.spec[1], schema=self.spec[2])
            self._opened.append(pg_store.close)
            return pg_store
        async_store = AsyncPostgresStore(self.spec[1], schema=self.spec[2])
        runner = self.runner
        self._opened.append(lambda: runner.run(async_store.aclose()))
        return Blocking(async_store, runner)

    def close(self) -> None:
        for close in reversed(self._opened):
            close()
        if self._runner is not None:
            self._runner.close()


def open_spec(spec: tuple[str, ...]) -> tuple[Any, Callable[[], None]]:
    """In a child process: a plain-method store from a ``StoreMaker.spec``, and its closer."""
    kind = spec[0]
    if kind == "sqlite":
        sqlite_store = SQLiteStore(spec[1])
        return sqlite_store, sqlite_store.close
    if kind == "postgres":
        pg_store = PostgresStore(spec[1], schema=spec[2])
        return pg_store, pg_store.close
    runner = asyncio.Runner()
    async_store = AsyncPostgresStore(spec[1], schema=spec[2])

    def close() -> None:
        runner.run(async_store.aclose())
        runner.close()

    return Blocking(async_store, runner), close
