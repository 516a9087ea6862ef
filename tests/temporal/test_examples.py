"""``examples/temporal`` runs as its README says: a worker process and the starter against
the Temporal dev server and the fake Coder server answering from the example's scripts. Run
from the repository root, it writes its files into the temporary directory, nothing into the
repository; an attempt that met another worker's lease is logged as one line, not a traceback."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from temporalio.exceptions import ApplicationError

from coder_proto.fake import ScriptBook
from tests.workers import WorkerProcess

from .harness import ROOT, fake_server
from .server import TemporalServer

EXAMPLE = ROOT / "examples" / "temporal"


def repository_files() -> set[Path]:
    """The files of the repository's root and of ``examples/`` (where an example run from the
    root would write), without what Python and the coverage measurement write themselves
    (bytecode caches, coverage's data files)."""
    top = {p for p in ROOT.iterdir() if p.is_file()}
    return {
        p
        for p in top | set((ROOT / "examples").rglob("*"))
        if not p.name.startswith(".coverage") and "__pycache__" not in p.parts
    }


@pytest.mark.timeout(240)
def test_worker_and_starter(temporal_server: TemporalServer) -> None:
    book = ScriptBook.from_json(json.loads((EXAMPLE / "scripts.json").read_text()))
    before = repository_files()
    with tempfile.TemporaryDirectory() as tmp, fake_server(scripts=book) as server:
        base = {k: v for k, v in os.environ.items() if k not in ("CODER_STORE", "PAYMENTS_DB")}
        env = {
            **base,
            "TEMPORAL_ADDRESS": temporal_server.address,
            "CODER_URL": server.url,
            "CODER_SESSION_TOKEN": server.token,
            "CODER_ORGANIZATION_ID": server.organization_id,
            "TMPDIR": tmp,  # the system's temporary directory, for the example's processes
            "PYTHONPATH": str(ROOT),
        }
        log = os.path.join(tmp, "worker.log")
        worker = WorkerProcess("examples.temporal.worker", environ=env, log=log)
        try:
            starter = subprocess.run(
                [sys.executable, "-m", "examples.temporal.starter", "2"],
                cwd=ROOT,
                env=env,
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
        finally:
            code = worker.stop()  # SIGTERM: a graceful shutdown
        with open(log, errors="replace") as f:
            worker_log = f.read()
        assert starter.returncode == 0, (starter.stdout, starter.stderr, worker_log)
        assert code == 0, worker_log
        assert "serving 'coder-orders'" in worker_log, worker_log
        lines = starter.stdout.splitlines()
        assert sum(1 for line in lines if line.startswith("order-")) == 2, lines
        assert lines.count("  Order confirmed; a receipt is on its way.") == 2, lines
        charged = [line for line in lines if line.startswith('  Charged: "charged 500 cents')]
        assert len(charged) == 2, lines
        assert lines[-1] == "sweep: 0 orphan chat(s) archived", lines
        assert all(chat.archived for chat in server.model.chats.values())
        written = Path(tmp) / "coder-agents-temporal-example"
        assert sorted(p.name for p in written.glob("*.sqlite3")) == [
            "payments.sqlite3",
            "workflows.sqlite3",
        ]
    assert repository_files() - before == set()


def test_a_busy_attempt_is_logged_as_one_line_that_says_it_is_expected() -> None:
    from examples.temporal.worker import BusyStepsAreExpected

    busy = ApplicationError("workflow order-1 is busy", type="WorkflowBusyError")
    other = ApplicationError("the chat is archived", type="CoderApiError")
    records = []
    for error in (busy, other):
        try:
            raise error
        except ApplicationError:
            records.append(
                logging.LogRecord(
                    "temporalio.activity",
                    logging.WARNING,
                    __file__,
                    1,
                    "Completing activity as failed",
                    None,
                    sys.exc_info(),
                )
            )
    assert all(BusyStepsAreExpected().filter(record) for record in records)
    assert records[0].getMessage() == (
        "workflow order-1 is busy; Temporal retries the step after its backoff (expected)"
    )
    assert records[0].exc_info is None
    assert records[1].getMessage() == "Completing activity as failed"
    assert records[1].exc_info is not None
