"""The core is I/O-free and never reads a clock or the system's randomness.

Two checks:

* importing every module of ``coder_proto`` loads no runtime or network module (``asyncio``,
  ``trio``, ``anyio``, ``socket``, ``ssl``, ``selectors``, ``threading``, ``httpx``,
  ``httpcore``, ``subprocess``, ``urllib.request``). attrs (a declared dependency) imports
  ``threading`` for a thread-local used by its reprs, so ``threading`` is checked as a delta
  over the interpreter state after ``import attrs``;
* a scan of the sources (the AST, with every import alias followed) finds no import of those
  modules and no clock read or unseeded randomness: ``time.time``/``monotonic``/
  ``perf_counter``/``sleep`` (and their ``_ns`` forms), ``datetime.now``/``utcnow``/``today``,
  ``date.today``, ``uuid1``/``uuid4``, the ``random`` module's shared generator (or a
  ``random.Random()`` without a seed), ``secrets``, ``os.urandom``. Modules that only compute
  (``datetime``, ``uuid``, ``time.strftime`` with a given time, a seeded ``random.Random``)
  are fine: time and randomness come in as inputs.
"""

from __future__ import annotations

import ast
import os
import pathlib
import subprocess
import sys

import pytest

IO_MODULES = (
    "asyncio",
    "trio",
    "anyio",
    "socket",
    "ssl",
    "selectors",
    "threading",
    "httpx",
    "httpcore",
    "subprocess",
    "urllib.request",
)
CORE = pathlib.Path(__file__).resolve().parents[2] / "coder_proto"

#: Reading any of these (calling it, or passing it on to be called later) reads the clock or
#: the system's randomness.
CLOCK_AND_ENTROPY = frozenset(
    {
        "time.time",
        "time.time_ns",
        "time.monotonic",
        "time.monotonic_ns",
        "time.perf_counter",
        "time.perf_counter_ns",
        "time.process_time",
        "time.process_time_ns",
        "time.thread_time",
        "time.thread_time_ns",
        "time.clock_gettime",
        "time.clock_gettime_ns",
        "time.sleep",
        "datetime.datetime.now",
        "datetime.datetime.utcnow",
        "datetime.datetime.today",
        "datetime.date.today",
        "uuid.uuid1",
        "uuid.uuid4",
        "os.urandom",
        "os.getrandom",
        "random.SystemRandom",
    }
)
#: These read the clock when called without the time to use.
CLOCK_WITHOUT_ARGUMENT = {
    "time.localtime": 0,
    "time.gmtime": 0,
    "time.ctime": 0,
    "time.asctime": 0,
    "time.strftime": 1,
}
#: Every name of these modules draws from shared or system randomness (``random.Random`` with
#: a seed is the injected source and is allowed).
ENTROPY_MODULES = ("random", "secrets")


def test_importing_the_core_loads_no_io_modules() -> None:
    code = (
        "import sys\n"
        "import attrs\n"
        "baseline = set(sys.modules)\n"
        "import pkgutil, importlib, coder_proto\n"
        "for m in pkgutil.walk_packages(coder_proto.__path__, 'coder_proto.'):\n"
        "    importlib.import_module(m.name)\n"
        f"forbidden = {IO_MODULES!r}\n"
        "bad = [m for m in forbidden if m in sys.modules and (m not in baseline or m != 'threading')]\n"
        "print(','.join(bad))\n"
    )
    # Without coverage's start-up hook: measuring the child would load its own I/O modules.
    env = {k: v for k, v in os.environ.items() if not k.startswith("COVERAGE_")}
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    )
    assert out.stdout.strip() == "", f"coder_proto imported I/O modules: {out.stdout.strip()}"


def _banned_import(module: str) -> bool:
    return any(module == m or module.startswith(m + ".") for m in IO_MODULES)


def _reads(name: str, call: ast.Call | None) -> str | None:
    """What reading the dotted ``name`` (called by ``call``, if it is called) reads, if
    anything."""
    if name in CLOCK_AND_ENTROPY:
        return name
    if name in CLOCK_WITHOUT_ARGUMENT:
        given = len(call.args) + len(call.keywords) if call is not None else None
        if given is not None and given <= CLOCK_WITHOUT_ARGUMENT[name]:
            return f"{name} without a time"
        return None
    module, _, _ = name.rpartition(".")
    if module not in ENTROPY_MODULES:
        return None
    if name == "random.Random":
        if call is not None and not call.args and not call.keywords:
            return "random.Random() without a seed"
        return None
    return name


def scan(source: str) -> list[tuple[int, str]]:
    """Forbidden imports and clock/entropy reads in one module's source, as ``(line, what)``.
    Import aliases are followed (``import time as t``, ``from datetime import date``)."""
    tree = ast.parse(source)
    aliases: dict[str, str] = {}
    problems: set[tuple[int, str]] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if _banned_import(alias.name):
                    problems.add((node.lineno, f"imports {alias.name}"))
                top = alias.name.split(".")[0]
                aliases[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                if _banned_import(node.module) or _banned_import(full):
                    problems.add(
                        (
                            node.lineno,
                            f"imports {node.module if _banned_import(node.module) else full}",
                        )
                    )
                aliases[alias.asname or alias.name] = full
    parents = {child: parent for parent in ast.walk(tree) for child in ast.iter_child_nodes(parent)}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Name | ast.Attribute):
            continue
        parent = parents.get(node)
        if isinstance(parent, ast.Attribute):
            continue  # only the whole of a dotted name
        parts: list[str] = []
        base: ast.expr = node
        while isinstance(base, ast.Attribute):
            parts.append(base.attr)
            base = base.value
        if not isinstance(base, ast.Name) or base.id not in aliases:
            continue
        name = ".".join([aliases[base.id], *reversed(parts)])
        call = parent if isinstance(parent, ast.Call) and parent.func is node else None
        what = _reads(name, call)
        if what is not None:
            problems.add((node.lineno, f"reads {what}"))
    return sorted(problems)


def test_core_sources_import_no_io_and_read_no_clock() -> None:
    problems = []
    for path in sorted(CORE.rglob("*.py")):
        for lineno, what in scan(path.read_text()):
            problems.append(f"{path.relative_to(CORE.parent)}:{lineno} {what}")
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize(
    ("source", "problem"),
    [
        ("import time\ntime.time()", "reads time.time"),
        ("import time as t\nt.monotonic_ns()", "reads time.monotonic_ns"),
        ("from time import perf_counter as pc\npc()", "reads time.perf_counter"),
        ("import time\ndef f(clock=time.monotonic): ...", "reads time.monotonic"),
        ("from time import sleep\nsleep(1)", "reads time.sleep"),
        ("import time\ntime.localtime()", "reads time.localtime without a time"),
        ("import time\ntime.strftime('%Y')", "reads time.strftime without a time"),
        ("import datetime\ndatetime.datetime.now()", "reads datetime.datetime.now"),
        ("import datetime as dt\ndt.datetime.now(dt.UTC)", "reads datetime.datetime.now"),
        ("from datetime import datetime\ndatetime.utcnow()", "reads datetime.datetime.utcnow"),
        ("from datetime import date\ndate.today()", "reads datetime.date.today"),
        ("import uuid\nuuid.uuid4()", "reads uuid.uuid4"),
        ("from uuid import uuid1\nuuid1()", "reads uuid.uuid1"),
        ("import random\nrandom.random()", "reads random.random"),
        ("from random import choice\nchoice([1])", "reads random.choice"),
        ("import random\nrandom.Random()", "reads random.Random() without a seed"),
        ("import random\nrandom.SystemRandom().random()", "reads random.SystemRandom"),
        ("import secrets\nsecrets.token_hex()", "reads secrets.token_hex"),
        ("import os\nos.urandom(8)", "reads os.urandom"),
        ("import asyncio", "imports asyncio"),
        ("from trio import lowlevel", "imports trio"),
        ("import anyio.abc", "imports anyio.abc"),
        ("import urllib.request", "imports urllib.request"),
        ("from urllib import request", "imports urllib.request"),
        ("from httpcore import Request", "imports httpcore"),
        ("import subprocess", "imports subprocess"),
    ],
)
def test_the_scan_finds_clock_reads_and_io_imports(source: str, problem: str) -> None:
    assert problem in [what for _, what in scan(source)]


@pytest.mark.parametrize(
    "source",
    [
        "import datetime\ndatetime.datetime(2026, 1, 1, tzinfo=datetime.UTC).isoformat()",
        "import datetime\ndatetime.datetime.fromisoformat('2026-01-01T00:00:00+00:00')",
        "import uuid\nstr(uuid.UUID(int=1, version=4))",
        "import random\nrng = random.Random(seed)\nrng.getrandbits(128)",
        "import random\ndef f(rng: random.Random) -> None: ...",
        "import time\ntime.strftime('%Y', moment)",
        "from urllib.parse import quote",
        "def f(now: float) -> float:\n    return now + 1.0",
    ],
)
def test_the_scan_allows_computing_with_given_times(source: str) -> None:
    assert scan(source) == []
