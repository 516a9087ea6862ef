"""A fake payment service for the crash-point matrix: one SQLite file shared by the workflow
processes and the test. ``apply`` honours idempotency keys: the first call with a key commits
the effect and returns its receipt; every later call with that key returns the same receipt
and changes nothing. ``calls`` counts every call, ``effects`` the committed effects."""

from __future__ import annotations

import sqlite3
from typing import Any

from coder_io_common.stores.sqlite import _wal_mode


def _connect(path: str) -> sqlite3.Connection:
    conn = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    # Switching a new file to WAL is refused, not waited for, while another process does it:
    # the store's own switch tries again until it is done.
    _wal_mode(conn, 30.0)
    conn.execute(
        "CREATE TABLE IF NOT EXISTS effects (key TEXT PRIMARY KEY, kind TEXT NOT NULL, "
        "amount INTEGER NOT NULL, receipt TEXT NOT NULL)"
    )
    conn.execute(
        "CREATE TABLE IF NOT EXISTS calls (n INTEGER PRIMARY KEY AUTOINCREMENT, key TEXT, kind TEXT)"
    )
    return conn


def apply(path: str, kind: str, key: str, amount: int) -> str:
    """Commit the effect once per key; return its receipt."""
    conn = _connect(path)
    try:
        conn.execute("BEGIN IMMEDIATE")
        conn.execute("INSERT INTO calls (key, kind) VALUES (?, ?)", (key, kind))
        row = conn.execute("SELECT receipt FROM effects WHERE key = ?", (key,)).fetchone()
        if row is None:
            count = conn.execute("SELECT COUNT(*) FROM effects").fetchone()[0]
            receipt = f"{kind}-{count + 1}"
            conn.execute(
                "INSERT INTO effects (key, kind, amount, receipt) VALUES (?, ?, ?, ?)",
                (key, kind, amount, receipt),
            )
        else:
            receipt = row[0]
        conn.execute("COMMIT")
        return str(receipt)
    finally:
        conn.close()


def effects(path: str) -> list[dict[str, Any]]:
    conn = _connect(path)
    try:
        rows = conn.execute("SELECT key, kind, amount, receipt FROM effects ORDER BY rowid")
        return [dict(zip(("key", "kind", "amount", "receipt"), r, strict=True)) for r in rows]
    finally:
        conn.close()


def calls(path: str) -> list[tuple[str, str]]:
    conn = _connect(path)
    try:
        return [(k, kind) for k, kind in conn.execute("SELECT key, kind FROM calls ORDER BY n")]
    finally:
        conn.close()
