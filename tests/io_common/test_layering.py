"""The async layer's place in the import graph (docs/architecture.md "Layers"): ``coder_io_asyncio`` and
``coder_io_trio`` are the one layer of ``coder_io_common._async`` on their runtime and import
nothing of each other; the shared packages import no adapter; ``coder_integrations`` stands
over all of them (the command line included) and nothing below it names it, not even in a
function or a lazy export (the adapters' ``instrument`` finds OpenTelemetry through an entry
point); no import circle runs through any package of the library, the core included (imports
under ``TYPE_CHECKING`` and inside functions included); and no two folders import each other."""

from __future__ import annotations

import ast
import pathlib
import re
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
#: A string that names a module of ``coder_integrations`` (or a name in one, as an entry point
#: does): what a lazy export or ``importlib.import_module`` would load.
INTEGRATIONS_NAME = re.compile(r"coder_integrations(\.\w+)*(:\w+)?")


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


def named_modules(path: pathlib.Path) -> set[str]:
    """Every string in ``path``'s code (its docstrings left out) that names a module of
    ``coder_integrations``: the keys of a ``lazy_exports`` table, an ``import_module`` argument."""
    tree = ast.parse(path.read_text(), str(path))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return {
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
        and INTEGRATIONS_NAME.fullmatch(node.value)
    }


def test_nothing_under_the_integrations_names_them() -> None:
    """No module below ``coder_integrations`` imports it, anywhere in its code (inside a
    function and under ``TYPE_CHECKING`` too), nor names one of its modules in a string that
    something could import (a lazy export, ``importlib.import_module``)."""
    found = {}
    for package in LIBRARY[:-1]:
        for module, path in module_files(package).items():
            used = {n for n in imported(module, path) if n.split(".")[0] == "coder_integrations"}
            used |= named_modules(path)
            if used:
                found[module] = sorted(used)
    assert found == {}


def test_the_integrations_check_sees_every_form(tmp_path: pathlib.Path) -> None:
    """The scans above find an import in a function, a lazy export and an ``import_module``
    argument, and leave docstrings and messages alone."""
    path = tmp_path / "example.py"
    path.write_text(
        '''"""Names coder_integrations.otel in a docstring."""
def f():
    """coder_integrations.otel"""
    from coder_integrations.otel import instrument
    raise ImportError("install coder_integrations.otel")
lazy_exports(__name__, {"coder_integrations.ai_sdk": ("x",)})
importlib.import_module("coder_integrations.cli")
'''
    )
    assert {n for n in imported("example", path) if n.startswith("coder_integrations")} == {
        "coder_integrations.otel",
        "coder_integrations.otel.instrument",
    }
    assert named_modules(path) == {"coder_integrations.ai_sdk", "coder_integrations.cli"}


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


def folder(module: str) -> str:
    """The room a module stands in, in the folder-level picture of the library: a module or
    package directly under ``coder_proto`` (``coder_proto._stream``, ``coder_proto._engine``),
    or one of the other packages as a whole."""
    parts = module.split(".")
    return ".".join(parts[:2]) if parts[0] == "coder_proto" else parts[0]


#: Two-way ties allowed as the pair itself. None is left; a tie is never added here.
KNOWN_TIES: tuple[set[str], ...] = ()


def folder_graph() -> dict[str, set[str]]:
    """Folder -> the folders it imports (anywhere: in functions and ``TYPE_CHECKING`` too)."""
    graph: dict[str, set[str]] = {}
    for package in LIBRARY:
        for module, path in module_files(package).items():
            targets = {folder(n) for n in imported(module, path) if n in MODULES}
            graph.setdefault(folder(module), set()).update(targets - {folder(module)})
    return graph


def circle_through(graph: dict[str, set[str]], source: str, target: str) -> list[str] | None:
    """A way back from ``target`` to ``source`` (so the arrow ``source -> target`` closes a
    circle), or ``None``."""
    seen = {target}
    ways = [[target]]
    while ways:
        way = ways.pop()
        for step in sorted(graph.get(way[-1], ())):
            if step == source:
                return [source, *way, source]
            if step not in seen:
                seen.add(step)
                ways.append([*way, step])
    return None


def test_no_arrow_between_folders_runs_back_up() -> None:
    """No two folders of the library import each other, directly or round a longer circle, so
    every folder stands on a floor above all it imports (docs/architecture.md "Layers"). The
    adapter shells, for one, take a recorder through ``coder_proto._recording``, below the
    transcript package (which replay ties to the connection above the shells)."""
    graph = folder_graph()
    assert "coder_proto._recording" in graph["coder_proto._shells"]  # guards the scanner
    found = []
    for source in sorted(graph):
        for target in sorted(graph[source]):
            if {source, target} in KNOWN_TIES:
                continue
            circle = circle_through(graph, source, target)
            if circle is not None:
                found.append(" -> ".join(circle))
    assert found == [], "arrows that close a circle of folders:\n" + "\n".join(found)


def test_the_circle_check_sees_a_way_back() -> None:
    graph = {"low": {"ground"}, "high": {"low"}, "ground": {"high"}}
    assert circle_through(graph, "high", "low") == ["high", "low", "ground", "high"]
    assert circle_through({"high": {"low"}, "low": set()}, "high", "low") is None


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
