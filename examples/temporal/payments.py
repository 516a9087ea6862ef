"""The example's stand-in payment service: one SQLite file, shared by every worker.

A charge is written conditionally, the way a store you control can refuse the write of a
worker that lost its workflow's lease while it was frozen (docs/durable-workflows.md "Fence
the effect", D37):

* one charge per idempotency key: the same key gets the same receipt again and changes
  nothing (a re-driven tool call never charges twice);
* per fencing scope (the workflow), the largest fencing token a charge came with is kept,
  and a charge whose token is lower is refused with ``StaleChargeError`` (and noted in the
  ``refused`` table): a later holder of the lease has written since.

The check, the token and the charge are one transaction, so no charge slips in between.
"""

from __future__ import annotations

import sqlite3

__all__ = ["StaleChargeError", "charge"]


class StaleChargeError(Exception):
    """The charge carries a fencing token lower than one this service has seen for its
    workflow: its worker lost the lease; the charge was not made."""


def _connect(path: str) -> sqlite3.Connection:
    db = sqlite3.connect(path, timeout=30.0, isolation_level=None)
    db.execute("CREATE TABLE IF NOT EXISTS charges (key TEXT PRIMARY KEY, cents INTEGER)")
    db.execute("CREATE TABLE IF NOT EXISTS fences (scope TEXT PRIMARY KEY, token INTEGER)")
    db.execute(
        "CREATE TABLE IF NOT EXISTS refused (n INTEGER PRIMARY KEY AUTOINCREMENT, "
        "scope TEXT, key TEXT, token INTEGER, newest INTEGER)"
    )
    return db


def charge(
    path: str, amount_cents: int, *, idempotency_key: str, scope: str, fencing_token: int
) -> str:
    """Charge ``amount_cents`` once per ``idempotency_key``, unless a charge of ``scope``
    came with a larger ``fencing_token`` already; return the receipt."""
    db = _connect(path)
    try:
        db.execute("BEGIN IMMEDIATE")
        row = db.execute("SELECT token FROM fences WHERE scope = ?", (scope,)).fetchone()
        if row is not None and fencing_token < row[0]:
            db.execute(
                "INSERT INTO refused (scope, key, token, newest) VALUES (?, ?, ?, ?)",
                (scope, idempotency_key, fencing_token, row[0]),
            )
            db.execute("COMMIT")
            raise StaleChargeError(
                f"refused: fencing token {fencing_token} is lower than {row[0]}, already seen "
                f"for {scope}"
            )
        db.execute(
            "INSERT INTO fences (scope, token) VALUES (?, ?) "
            "ON CONFLICT (scope) DO UPDATE SET token = excluded.token",
            (scope, fencing_token),
        )
        db.execute(
            "INSERT OR IGNORE INTO charges (key, cents) VALUES (?, ?)",
            (idempotency_key, amount_cents),
        )
        (rowid,) = db.execute(
            "SELECT rowid FROM charges WHERE key = ?", (idempotency_key,)
        ).fetchone()
        db.execute("COMMIT")
        return f"receipt-{rowid}"
    finally:
        db.close()


def counts(path: str) -> dict[str, int]:
    """How many charges were made and how many stale ones were refused."""
    db = _connect(path)
    try:
        (charges,) = db.execute("SELECT count(*) FROM charges").fetchone()
        (refused,) = db.execute("SELECT count(*) FROM refused").fetchone()
        return {"charges": charges, "refused": refused}
    finally:
        db.close()
