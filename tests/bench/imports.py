"""What importing costs, against ``import httpx`` (the one dependency every program of the
library loads anyway), in fresh processes.

* ``imports.asyncio``: ``import coder_io_asyncio``: the core and the asyncio agent, client and
  watch; durable workflows, stores, transcripts, the fake server and the integrations are
  imported on first use, httpx with the first client or agent made and wsproto with the first
  WebSocket. Target: at or under 1.5x.
* ``imports.trio``: ``import coder_io_trio``, the same on trio. Target: at or under 1.5x.
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

Each round starts one interpreter per line and one for the floor, back to back in alternating
order, and takes the CPU time it used from start to exit (user and system, interpreter start
included: what a command line or a cold start pays; CPU time, which other work on a shared
machine disturbs far less than wall time); the ratio is the median of the per-round ratios.
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

from ._common import Result, Settings

__all__ = ["run"]

ROOT = pathlib.Path(__file__).resolve().parents[2]

FLOOR = "import httpx"

#: name, code run by ``python -c``, target (x the floor; ``None``: reported only).
LINES: tuple[tuple[str, str, float | None], ...] = (
    ("imports.asyncio", "import coder_io_asyncio", 1.5),
    ("imports.trio", "import coder_io_trio", 1.5),
    ("imports.sync", "from coder_io_sync import CoderAgent, CoderChatClient", 1.5),
    ("imports.asyncio_dependencies", "import asyncio, attrs, msgspec", None),
    ("imports.asyncio_connected", "import coder_io_asyncio, httpx, wsproto", None),
    (
        "imports.cli_version",
        "import sys; sys.argv = ['coder-agent', '--version']; "
        "from coder_integrations.cli import main; main()",
        1.0,
    ),
    (
        "imports.cli_help",
        "import sys; sys.argv = ['coder-agent', '--help']; "
        "from coder_integrations.cli import main; main()",
        1.0,
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
    for code in (FLOOR, *(line[1] for line in LINES)):
        _cpu(code, env)
    rounds = _rounds(settings)
    results = []
    for name, code, target in LINES:
        values: list[float] = []
        floors: list[float] = []
        for i in range(rounds):
            if i % 2:
                values.append(_cpu(code, env))
                floors.append(_cpu(FLOOR, env))
            else:
                floors.append(_cpu(FLOOR, env))
                values.append(_cpu(code, env))
        ratio = statistics.median(v / f for v, f in zip(values, floors, strict=True))
        results.append(
            Result(
                name,
                rounds,
                statistics.median(values),
                statistics.median(floors),
                ratio,
                {"target": "reported (CPU, fresh process)"}
                if target is None
                else {
                    "target": f"<= {target}x `{FLOOR}` (CPU, fresh process)",
                    "meets_target": ratio <= target,
                },
            )
        )
    return results
