"""The crash-point matrix's payment service (``tests/durable/payments.py``) opened by several
worker processes at the same instant: each one connects, none is refused."""

from __future__ import annotations

import multiprocessing
import os
from typing import Any

from . import payments

PROCESSES = 6
TRIALS = 12


def _open(path: str, barrier: Any, errors: Any) -> None:
    barrier.wait()
    try:
        payments._connect(path).close()
    except Exception as exc:  # reported to the test
        errors.append(repr(exc))


def test_workers_opening_a_new_payments_file_at_once_all_connect(tmp_path: Any) -> None:
    """Switching a new file to WAL takes a lock SQLite's busy handler does not wait for: the
    processes that lose the race are told "database is locked" unless the switch is tried
    again. A workflow's effect was lost that way when workers started together."""
    context = multiprocessing.get_context("spawn")
    with context.Manager() as manager:
        errors = manager.list()
        for trial in range(TRIALS):
            path = os.path.join(tmp_path, f"payments-{trial}.sqlite3")
            barrier = manager.Barrier(PROCESSES)
            workers = [
                context.Process(target=_open, args=(path, barrier, errors))
                for _ in range(PROCESSES)
            ]
            for worker in workers:
                worker.start()
            for worker in workers:
                worker.join(60)
            assert [w.exitcode for w in workers] == [0] * PROCESSES
        assert list(errors) == []
