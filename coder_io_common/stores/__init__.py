"""Durable stores for every runtime (``coder_proto.durable.DurableStore``): they belong to no
single adapter, so they live here.

* ``SQLiteStore``: one SQLite file in WAL mode, safe across processes on one machine (the
  standard library only); every adapter also exports it.
* ``PostgresStore`` / ``AsyncPostgresStore``: one PostgreSQL database shared by a fleet of
  workers, on psycopg 3 (the ``postgres`` extra: ``pip install 'coder-agents[postgres]'``).
  They are imported on first use, so the adapters never need psycopg.

Every store is imported on first use: a program that keeps no durable state pays nothing for
them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coder_proto.adapter import lazy_exports

if TYPE_CHECKING:
    from .postgres import AsyncPostgresStore as AsyncPostgresStore
    from .postgres import PostgresStore as PostgresStore
    from .sqlite import SQLiteStore as SQLiteStore

__all__ = ["STORE_NAMES", "AsyncPostgresStore", "PostgresStore", "SQLiteStore"]

STORE_NAMES: tuple[str, ...] = ("SQLiteStore",)
"""The store names every adapter exports beside its own."""

__getattr__, __dir__ = lazy_exports(
    __name__, {".sqlite": ("SQLiteStore",), ".postgres": ("AsyncPostgresStore", "PostgresStore")}
)
