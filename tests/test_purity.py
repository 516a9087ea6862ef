"""The core is I/O-free: importing it must not pull in any runtime, network or clock module.

attrs (a declared dependency) imports ``threading`` for a thread-local used by its reprs, so
``threading`` is checked as a delta over the interpreter state after ``import attrs``; every
other forbidden module must be absent outright. A source scan backs this up: no module of
``coder_proto`` imports them or reads the clock.
"""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

FORBIDDEN = ("asyncio", "trio", "socket", "ssl", "selectors", "threading", "httpx")
CORE = pathlib.Path(__file__).resolve().parent.parent / "coder_proto"


def test_importing_the_core_loads_no_io_modules() -> None:
    code = (
        "import sys\n"
        "import attrs\n"
        "baseline = set(sys.modules)\n"
        "import pkgutil, importlib, coder_proto\n"
        "for m in pkgutil.walk_packages(coder_proto.__path__, 'coder_proto.'):\n"
        "    importlib.import_module(m.name)\n"
        f"forbidden = {FORBIDDEN!r}\n"
        "bad = [m for m in forbidden if m in sys.modules and (m not in baseline or m != 'threading')]\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "", f"coder_proto imported I/O modules: {out.stdout.strip()}"


def _imports(tree: ast.AST) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name.split(".")[0]) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append((node.lineno, node.module.split(".")[0]))
    return found


def test_core_sources_import_no_io_and_read_no_clock() -> None:
    forbidden = set(FORBIDDEN) | {"anyio", "httpcore", "subprocess", "time", "datetime"}
    problems = []
    for path in sorted(CORE.rglob("*.py")):
        tree = ast.parse(path.read_text(), filename=str(path))
        for lineno, name in _imports(tree):
            if name in forbidden:
                problems.append(f"{path.relative_to(CORE.parent)}:{lineno} imports {name}")
    assert not problems, "\n".join(problems)
