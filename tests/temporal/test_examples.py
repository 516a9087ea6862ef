"""``examples/temporal`` runs as its README says: a worker process and the starter against
the Temporal dev server and the fake Coder server answering from the example's scripts."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

from coder_proto.fake import ScriptBook

from .harness import ROOT, fake_server
from .server import TemporalServer

EXAMPLE = ROOT / "examples" / "temporal"


@pytest.mark.timeout(240)
def test_worker_and_starter(temporal_server: TemporalServer) -> None:
    book = ScriptBook.from_json(json.loads((EXAMPLE / "scripts.json").read_text()))
    with tempfile.TemporaryDirectory() as tmp, fake_server(scripts=book) as server:
        env = {
            "TEMPORAL_ADDRESS": temporal_server.address,
            "CODER_URL": server.url,
            "CODER_SESSION_TOKEN": server.token,
            "CODER_ORGANIZATION_ID": server.organization_id,
            "CODER_STORE": os.path.join(tmp, "workflows.sqlite3"),
            "PAYMENTS_DB": os.path.join(tmp, "payments.sqlite3"),
            "PYTHONPATH": str(ROOT),
        }
        log = os.path.join(tmp, "worker.log")
        with open(log, "wb") as out:
            worker = subprocess.Popen(
                [sys.executable, "-m", "examples.temporal.worker"],
                cwd=tmp,
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
            )
        try:
            starter = subprocess.run(
                [sys.executable, "-m", "examples.temporal.starter", "2"],
                cwd=tmp,
                env={**os.environ, **env},
                capture_output=True,
                text=True,
                timeout=180,
                check=False,
            )
        finally:
            worker.terminate()  # SIGTERM: a graceful shutdown
            code = worker.wait(timeout=30)
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
