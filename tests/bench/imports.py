"""What importing costs, against ``import httpx`` (the one dependency every program of the
library loads anyway), in fresh processes.

* ``imports.asyncio``: ``import coder_io_asyncio``: the core and the asyncio agent, client and
  watch; durable workflows, stores, transcripts, the fake server and the integrations are
  imported on first use, httpx with the first client or agent made and wsproto with the first
  WebSocket. Target: at or under 1.5x. Also reported against ``import asyncio, httpx``
  (``extra.baseline_ratio``).
* ``imports.trio``: ``import coder_io_trio``, the same on trio. Target: at or under 1.5x.
  ``import trio`` alone costs about 0.9x ``import httpx``, so the line is also reported
  against ``import trio, httpx`` (``extra.baseline_ratio``), what a trio program that makes
  a client loads whatever library it uses.
* ``imports.sync``: ``from coder_io_sync import CoderAgent, CoderChatClient``: the blocking
  adapter's package imports nothing by itself (every name is imported on first use), so the
  line takes its agent and client. Target: at or under 1.5x.
* ``imports.asyncio_dependencies``: what the asyncio adapter's dependencies take alone
  (asyncio, attrs, msgspec): the part of ``imports.asyncio`` that is not the library's own
  code. Reported, no target.
* ``imports.asyncio_connected``: ``import coder_io_asyncio, httpx, wsproto``: what a program
  has loaded once its first client is made and its first stream opened. Reported, no target.
* ``imports.cli_version`` / ``imports.cli_help``: ``coder-agent --version`` and ``--help``
  (the console script's entry point, ``coder_integrations.cli:main``), which import no protocol
  code. Target: at or under 1.0x.

Where an adapter's import goes (profiled with ``-X importtime``, and by importing the parts
alone): the core's stream machinery (connection, agent core, session, turn, reader,
translator, output parts, wire events) costs about 1.15x ``import httpx`` by itself, and with
asyncio about 1.4x; the adapter's own modules (driver, agent, client, watch, runtime) and the
shells they take from the core add about 0.1x. Most of the core's share is class creation:
the import defines about 150 attrs classes (wire records, output parts, actions, transport
events, prompts), and attrs writes and compiles their methods at import, at about half a
millisecond each: more than half of the library's own import time. The modules a first
stream does not use (the durable store's calls, tool and structured-output support, chat
extras and model hints, the REST jobs and workspace routes) are imported with the first
operation that needs them, not with the adapter (``tests/repo/test_import_cost.py`` pins
it). What remains is not in the adapters: what would bring ``imports.asyncio`` well under
1.5x is cheaper class creation in the core, and ``imports.trio`` cannot reach
1.5x ``import httpx`` with trio itself at 0.9x; against ``import trio, httpx`` it is about
1.3x.

Each round starts one interpreter per line, one for the floor and one for the line's
baseline, back to back in an order that turns from round to round, and takes the CPU time
each used from start to exit (user and system, interpreter start included: what a command
line or a cold start pays; CPU time, which other work on a shared machine disturbs far less
than wall time); the ratio is the median of the per-round ratios.
Every process reads compiled bytecode, as an installed package does: a first, untimed run
writes it to a cache directory of the run's own (the checkout is left as it is).
"""

from __future__ import annotations

import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
from typing import Any

from ._common import Result, Settings

__all__ = ["run"]

ROOT = pathlib.Path(__file__).resolve().parents[2]

FLOOR = "import httpx"

#: name, code run by ``python -c``, target (x the floor; ``None``: reported only), and the
#: line's second baseline (``None``: none): the event loop the adapter runs on with httpx,
#: what any program of that runtime loads before it imports the library.
LINES: tuple[tuple[str, str, float | None, str | None], ...] = (
    ("imports.asyncio", "import coder_io_asyncio", 1.5, "import asyncio, httpx"),
    ("imports.trio", "import coder_io_trio", 1.5, "import trio, httpx"),
    ("imports.sync", "from coder_io_sync import CoderAgent, CoderChatClient", 1.5, None),
    ("imports.asyncio_dependencies", "import asyncio, attrs, msgspec", None, None),
    ("imports.asyncio_connected", "import coder_io_asyncio, httpx, wsproto", None, None),
    (
        "imports.cli_version",
        "import sys; sys.argv = ['coder-agent', '--version']; "
        "from coder_integrations.cli import main; main()",
        1.0,
        None,
    ),
    (
        "imports.cli_help",
        "import sys; sys.argv = ['coder-agent', '--help']; "
        "from coder_integrations.cli import main; main()",
        1.0,
        None,
    ),
)


def _environment(cache: str) -> dict[str, str]:
    """This checkout first on the path, bytecode cached under ``cache``, the same hash seed:
    the processes differ only in what they import."""
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "PYTHONPYCACHEPREFIX": cache, "PYTHONHASHSEED": "0"}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def _cpu(code: str, env: dict[str, str]) -> float:
    """CPU seconds a fresh interpreter uses to run ``code`` and exit (output discarded)."""
    process = subprocess.Popen(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    if process.returncode != 0:
        raise subprocess.CalledProcessError(process.returncode, code)
    return usage.ru_utime + usage.ru_stime


def _rounds(settings: Settings) -> int:
    return {"smoke": 1, "quick": 5}.get(settings.mode, 9)


def run(settings: Settings) -> list[Result]:
    with tempfile.TemporaryDirectory(prefix="coder-bench-pycache-") as cache:
        return _run(settings, _environment(cache))


def _run(settings: Settings, env: dict[str, str]) -> list[Result]:
    # Write the bytecode and warm the file system once, untimed.
    baselines = [line[3] for line in LINES if line[3] is not None]
    for code in (FLOOR, *baselines, *(line[1] for line in LINES)):
        _cpu(code, env)
    rounds = _rounds(settings)
    results = []
    for name, code, target, baseline in LINES:
        values: list[float] = []
        floors: list[float] = []
        seconds: list[float] = []
        for i in range(rounds):
            # The line, its floor and its baseline, in an order that turns every round.
            order = [(values, code), (floors, FLOOR)]
            if baseline is not None:
                order.append((seconds, baseline))
            shift = i % len(order)
            for out, run_code in order[shift:] + order[:shift]:
                out.append(_cpu(run_code, env))
        ratio = statistics.median(v / f for v, f in zip(values, floors, strict=True))
        extra: dict[str, Any] = (
            {"target": "reported (CPU, fresh process)"}
            if target is None
            else {
                "target": f"<= {target}x `{FLOOR}` (CPU, fresh process)",
                "meets_target": ratio <= target,
            }
        )
        if baseline is not None:
            extra["baseline"] = f"`{baseline}` (reported)"
            extra["baseline_s"] = statistics.median(seconds)
            extra["baseline_ratio"] = statistics.median(
                v / b for v, b in zip(values, seconds, strict=True)
            )
        results.append(
            Result(name, rounds, statistics.median(values), statistics.median(floors), ratio, extra)
        )
    return results
