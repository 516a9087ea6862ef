"""The async layer's place in the import graph (docs/architecture.md "Layers"): ``coder_io_asyncio`` and
``coder_io_trio`` are the one layer of ``coder_io_common._async`` on their runtime and import
nothing of each other; the shared packages import no adapter; ``coder_integrations`` stands
over all of them (the command line included) and only one door below it opens onto it
(``instrument``, OpenTelemetry), when it is used; and no import circle runs through any
package of the library, the core included (imports under ``TYPE_CHECKING`` and inside
functions included)."""

from __future__ import annotations

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PACKAGES = ("coder_io_common", "coder_io_asyncio", "coder_io_trio")
#: Every package of the library: the import graph of all of them together has no circle.
LIBRARY = (
    "coder_proto",
    "coder_io_common",
    "coder_io_asyncio",
    "coder_io_trio",
    "coder_io_sync",
    "coder_integrations",
)
#: The modules under ``coder_integrations`` that import it, each only inside the function that
#: needs it: ``instrument``, which every adapter re-exports (OpenTelemetry). The command line,
#: which serves the fake server, stands in ``coder_integrations`` itself.
INTEGRATIONS_DOORS = {
    "coder_io_common.instrumentation": {"coder_integrations.otel"},
}


def module_files(package: str) -> dict[str, pathlib.Path]:
    """Module name -> source file, for every module of ``package``."""
    out: dict[str, pathlib.Path] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def imported(module: str, path: pathlib.Path) -> set[str]:
    """Every module name ``module`` imports, anywhere in its source (absolute; for ``from X
    import y``: ``X.y`` when that is a module of the library, else ``X`` and ``X.y``)."""
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                source = ".".join([*base, node.module] if node.module else base)
            else:
                source = node.module or ""
            members = {f"{source}.{alias.name}" for alias in node.names}
            names.update(members)
            if not members <= MODULES:  # ``from package import submodule`` needs no more
                names.add(source)
    return names


MODULES: set[str] = set()
for _package in LIBRARY:
    MODULES.update(module_files(_package))

ALL: dict[str, pathlib.Path] = {}
for _package in PACKAGES:
    ALL.update(module_files(_package))


def test_the_adapters_import_nothing_of_each_other() -> None:
    for package, other in (("coder_io_trio", "coder_io_asyncio"), ("coder_io_asyncio", "trio")):
        for module, path in module_files(package).items():
            bad = {n for n in imported(module, path) if n == other or n.startswith(other + ".")}
            assert not bad, (module, bad)


def test_the_shared_layer_imports_no_adapter_and_no_runtime() -> None:
    for module, path in module_files("coder_io_common").items():
        if module == "coder_io_common.stores.postgres":
            # psycopg's async connections need asyncio: the async store is asyncio's only
            # (trio refuses it with a clear message); the blocking store serves every runtime.
            continue
        bad = {
            n
            for n in imported(module, path)
            if n.split(".")[0] in {"coder_io_asyncio", "coder_io_trio", "coder_io_sync", "trio"}
            or n == "asyncio"
        }
        assert not bad, (module, bad)


def top_level_imports(path: pathlib.Path) -> set[str]:
    """The modules ``path`` imports when it is itself imported: at module level, outside
    ``TYPE_CHECKING`` blocks (absolute names; relative imports are ``"."``)."""
    names: set[str] = set()

    def scan(body: list[ast.stmt]) -> None:
        for node in body:
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                names.add(node.module if not node.level and node.module else ".")
            elif isinstance(node, ast.If):
                if not (isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"):
                    scan(node.body)
                scan(node.orelse)
            elif isinstance(node, ast.Try):
                scan(node.body)
                for handler in node.handlers:
                    scan(handler.body)
                scan(node.orelse)
                scan(node.finalbody)

    scan(ast.parse(path.read_text(), str(path)).body)
    return names


def test_nothing_under_the_integrations_imports_them_but_one_door() -> None:
    for package in LIBRARY[:-1]:
        for module, path in module_files(package).items():
            used = {n for n in imported(module, path) if n.split(".")[0] == "coder_integrations"}
            allowed = INTEGRATIONS_DOORS.get(module, set())
            bad = {n for n in used if not any(n == a or n.startswith(a + ".") for a in allowed)}
            assert not bad, (module, bad)
            on_import = {
                n for n in top_level_imports(path) if n.split(".")[0] == "coder_integrations"
            }
            assert not on_import, (module, on_import)


def test_no_import_circle_runs_through_any_package() -> None:
    files: dict[str, pathlib.Path] = {}
    for package in LIBRARY:
        files.update(module_files(package))
    graph = {m: {n for n in imported(m, p) if n in files and n != m} for m, p in files.items()}
    assert sum(map(len, graph.values())) > 500  # guards the scanner: it found the imports
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(module: str) -> None:
        state[module] = 1
        stack.append(module)
        for target in sorted(graph[module]):
            if state.get(target) == 1:
                circle = [*stack[stack.index(target) :], target]
                pytest.fail(f"import circle: {' -> '.join(circle)}")
            if target not in state:
                visit(target)
        stack.pop()
        state[module] = 2

    for module in sorted(graph):
        if module not in state:
            visit(module)


@pytest.mark.parametrize(
    ("package", "absent"),
    [("coder_io_trio", "coder_io_asyncio"), ("coder_io_asyncio", "trio")],
)
def test_importing_one_adapter_loads_nothing_of_the_other(package: str, absent: str) -> None:
    code = (
        f"import sys, {package}, {package}.durable\n"
        f"loaded = sorted(m for m in sys.modules if m == {absent!r} or m.startswith({absent!r} + '.'))\n"
        "print(loaded)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
