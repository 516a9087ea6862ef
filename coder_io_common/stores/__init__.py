"""Durable stores for every runtime (``coder_proto.durable.DurableStore``): they belong to no
single adapter, so they live here.

* ``SQLiteStore``: one SQLite file in WAL mode, safe across processes on one machine (the
  standard library only); every adapter also exports it.
* ``PostgresStore`` / ``AsyncPostgresStore``: one PostgreSQL database shared by a fleet of
  workers, on psycopg 3 (the ``postgres`` extra: ``pip install 'coder-agents[postgres]'``).
  They are imported on first use, so the adapters never need psycopg.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .sqlite import SQLiteStore

if TYPE_CHECKING:
    from .postgres import AsyncPostgresStore, PostgresStore

__all__ = ["STORE_NAMES", "AsyncPostgresStore", "PostgresStore", "SQLiteStore"]

STORE_NAMES: tuple[str, ...] = ("SQLiteStore",)
"""The store names every adapter exports beside its own."""

_POSTGRES = frozenset({"AsyncPostgresStore", "PostgresStore"})


def __getattr__(name: str) -> Any:
    if name in _POSTGRES:
        from . import postgres

        return getattr(postgres, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
