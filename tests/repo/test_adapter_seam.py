"""The seam between the core and what stands on it is public: the io packages and the
integrations above them import the core through its public modules only (``coder_proto.__all__``, ``coder_proto.durable``,
``coder_proto.transcript``, ``coder_proto.fake``, ``coder_proto.adapter``), no private core
module reaches a name through a public face, and every core type in the signatures an embedder
or an adapter calls is exported from a public module (docs/runtimes.md "Writing an adapter")."""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
import typing
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import attrs
import pytest

ROOT = Path(__file__).resolve().parents[2]
#: The packages that stand on the core: the adapters, their shared layer, and the integrations.
OVER_THE_CORE = (
    "coder_io_common",
    "coder_io_asyncio",
    "coder_io_trio",
    "coder_io_sync",
    "coder_integrations",
)
FACES = (
    "coder_proto",
    "coder_proto.durable",
    "coder_proto.transcript",
    "coder_proto.fake",
    "coder_proto.adapter",
)


def _is_private(module: str) -> bool:
    return any(part.startswith("_") for part in module.split(".")[1:])


def _sources(*packages: str) -> Iterator[tuple[Path, str, ast.Module]]:
    """Each source file of ``packages`` with its dotted module name and syntax tree."""
    for package in packages:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            tree = ast.parse(path.read_text("utf-8"), str(path))
            yield path, ".".join(parts), tree


def _package_of(path: Path, module: str) -> str:
    return module if path.name == "__init__.py" else module.rpartition(".")[0]


def _source_of(path: Path, module: str, node: ast.ImportFrom) -> str:
    """The absolute name of the module a ``from ... import`` in ``module`` imports from."""
    if not node.level:
        return node.module or ""
    base = _package_of(path, module).split(".")
    base = base[: len(base) - (node.level - 1)]
    return ".".join([*base, *([node.module] if node.module else [])])


def _imported_modules(path: Path, module: str, tree: ast.Module) -> Iterator[tuple[int, str]]:
    """Every module ``tree`` imports, absolute (relative imports resolved), with its line: the
    ``import`` and ``from ... import`` statements anywhere (in functions and ``TYPE_CHECKING``
    blocks too) and ``importlib.import_module("...")`` calls with a literal name."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            target = _source_of(path, module, node)
            yield node.lineno, target
            for alias in node.names:  # ``from package import submodule``
                yield node.lineno, f"{target}.{alias.name}"
        elif (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute | ast.Name)
            and getattr(node.func, "attr", getattr(node.func, "id", None)) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            yield node.lineno, node.args[0].value


def _is_module(name: str) -> bool:
    """``name`` is a module of the core (a file or a package), not a name defined in one."""
    path = ROOT.joinpath(*name.split("."))
    return path.with_suffix(".py").is_file() or (path / "__init__.py").is_file()


def test_nothing_over_the_core_imports_a_private_core_module() -> None:
    """No module of ``coder_io_*`` or ``coder_integrations`` imports ``coder_proto._x`` or
    ``coder_proto.<package>._x``: what an adapter or an integration needs from the core is
    public and documented."""
    found = [
        f"{path.relative_to(ROOT)}:{line}: {target}"
        for path, module, tree in _sources(*OVER_THE_CORE)
        for line, target in _imported_modules(path, module, tree)
        if target.split(".")[0] == "coder_proto" and _is_private(target) and _is_module(target)
    ]
    assert found == [], "private core modules imported over the core:\n" + "\n".join(found)
    walked = {module.split(".")[0] for _, module, _ in _sources(*OVER_THE_CORE)}
    assert walked == set(OVER_THE_CORE)  # every package was read


def test_the_check_sees_a_private_import() -> None:
    """The walk above finds every form of import it forbids (so an empty answer means none)."""
    source = (
        "from coder_proto._connection import Connection\n"
        "import coder_proto._json\n"
        "def f():\n"
        "    from coder_proto.durable import _store\n"
        "    importlib.import_module('coder_proto.transcript._replay')\n"
    )
    path = ROOT / "coder_io_common" / "example.py"
    seen = {
        target
        for _, target in _imported_modules(path, "coder_io_common.example", ast.parse(source))
        if _is_private(target) and _is_module(target)
    }
    assert seen == {
        "coder_proto._connection",
        "coder_proto._json",
        "coder_proto.durable._store",
        "coder_proto.transcript._replay",
    }


def test_no_private_core_module_imports_a_public_face() -> None:
    """A private core module takes each name from the module defining it, never through
    ``coder_proto`` or another public face: the faces import their modules on first use, and
    a private module reaching back through one would load (or loop into) the whole face."""
    found = []
    for path, module, tree in _sources("coder_proto"):
        if not _is_private(module):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                found += [
                    f"{path.relative_to(ROOT)}:{node.lineno}: import {alias.name}"
                    for alias in node.names
                    if alias.name in FACES
                ]
            elif isinstance(node, ast.ImportFrom):
                target = _source_of(path, module, node)
                names = [a.name for a in node.names if not _is_module(f"{target}.{a.name}")]
                if target in FACES and names:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {target}: {names}")
    assert found == [], "private core modules importing a public face:\n" + "\n".join(found)


# -- the types of public signatures ------------------------------------------------------------


def _exported() -> dict[int, str]:
    out: dict[int, str] = {}
    for face in FACES:
        module = importlib.import_module(face)
        for name in module.__all__:
            out.setdefault(id(getattr(module, name)), f"{face}.{name}")
    return out


def _namespace() -> dict[str, Any]:
    """Every public name: what a string annotation may name besides its module's globals."""
    namespace: dict[str, Any] = {}
    for face in FACES:
        module = importlib.import_module(face)
        namespace.update({name: getattr(module, name) for name in module.__all__})
    return namespace


def _annotations(owner: str, obj: Any) -> Iterator[tuple[str, Any]]:
    """The annotations of ``obj`` (a function, or an attrs class's public fields), each
    evaluated in its module's globals and the public names."""
    module = sys.modules[obj.__module__]
    namespace = {**_namespace(), **vars(module)}
    if inspect.isclass(obj):
        raw = {f.name: f.type for f in attrs.fields(obj) if not f.name.startswith("_")}
    else:
        raw = dict(inspect.get_annotations(obj))
    for name, annotation in raw.items():
        if isinstance(annotation, str):
            annotation = eval(annotation, namespace)
        yield f"{owner}:{name}", annotation


def _classes(annotation: Any) -> Iterator[type]:
    """The classes an annotation names, through unions, generics and ``Callable``."""
    if isinstance(annotation, list):
        for item in annotation:
            yield from _classes(item)
        return
    if isinstance(annotation, type):
        yield annotation
    origin = typing.get_origin(annotation)
    if isinstance(origin, type):
        yield origin
    for argument in typing.get_args(annotation):
        yield from _classes(argument)


def _members(cls: type) -> Iterator[tuple[str, Callable[..., Any]]]:
    """The public methods and properties ``cls`` defines itself (its constructor too)."""
    for name, value in vars(cls).items():
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(value, staticmethod | classmethod):
            value = value.__func__
        if isinstance(value, property):
            value = value.fget
        if inspect.isfunction(value):
            yield f"{cls.__qualname__}.{name}", value


def _signatures() -> Iterator[tuple[str, Any]]:
    """The annotations of what an embedder and an adapter call: ``Connection``, the commands
    it hands out and the handles they carry, a task and a tool run, the agent's core and its
    session, the values of ``coder_proto.__all__``, and ``coder_proto.durable``. The handles
    (``Conn``, ``HttpExchange``, ``ToolBatch``, ``StoreRequest``, ``Task``, and the
    ``ConnectionStats`` view) are built by the connection: their methods and properties count, and of their constructors' parameters the
    request an embedder performs (``HttpExchange.request``)."""
    import coder_proto
    from coder_proto import adapter, durable

    classes: list[type] = [
        coder_proto.Connection,
        coder_proto.Task,
        coder_proto.ToolBatch,
        coder_proto.AgentCore,
        adapter.Session,
        *typing.get_args(adapter.ConnectionCommand),
    ]
    for name in (*coder_proto.__all__, *durable.__all__):
        value = getattr(durable if name in durable.__all__ else coder_proto, name)
        if inspect.isclass(value) and attrs.has(value):
            classes.append(value)
        elif inspect.isfunction(value):
            yield from _annotations(f"{value.__module__}.{name}", value)
        elif inspect.isclass(value):
            classes.append(value)
    handles = {coder_proto.Conn, coder_proto.HttpExchange, coder_proto.ToolBatch}
    handles |= {coder_proto.StoreRequest, coder_proto.Task, coder_proto.ConnectionStats}
    for cls in dict.fromkeys(classes):
        if attrs.has(cls):
            yield from _annotations(cls.__qualname__, cls)
        for owner, function in _members(cls):
            if owner.endswith(".__init__") and (attrs.has(cls) or cls in handles):
                continue  # an attrs class's fields are its parameters; a handle's are the core's
            yield from _annotations(owner, function)
    for where, annotation in _annotations("HttpExchange", coder_proto.HttpExchange.__init__):
        if where.endswith(":request"):
            yield where, annotation


def test_the_types_of_public_signatures_are_exported() -> None:
    """Every core class named by an annotation of ``_signatures`` is the value of a public
    name: a user can import what a method takes or returns and what a command carries."""
    exported = _exported()
    seen: set[type] = set()
    missing: dict[str, list[str]] = {}
    for where, annotation in _signatures():
        for cls in _classes(annotation):
            if not cls.__module__.startswith("coder_proto"):
                continue
            seen.add(cls)
            if id(cls) not in exported:
                missing.setdefault(f"{cls.__module__}.{cls.__qualname__}", []).append(where)
    assert missing == {}, "unexported types in public signatures: " + repr(missing)
    # The walk reaches the embedder's vocabulary (so an empty answer means something).
    names = {exported[id(cls)] for cls in seen}
    for name in (
        "coder_proto.AgentCore",
        "coder_proto.HttpRequest",
        "coder_proto.ActionToolCall",
        "coder_proto.PortShare",
        "coder_proto.adapter.HttpResponse",
        "coder_proto.durable.DurableMachine",
        "coder_proto.durable.LeaseCheck",
    ):
        assert name in names, name


@pytest.mark.parametrize(
    ("face", "name", "module"),
    [
        ("coder_proto", "AgentCore", "coder_proto._agent.agent_core"),
        ("coder_proto", "HttpRequest", "coder_proto._rest.http"),
        ("coder_proto", "ActionToolCall", "coder_proto._wire.chats"),
        ("coder_proto", "PortShare", "coder_proto._rest.workspaces"),
        ("coder_proto.durable", "DurableMachine", "coder_proto.durable._store_engine"),
        ("coder_proto.durable", "LeaseCheck", "coder_proto.durable._tools"),
        ("coder_proto.adapter", "HttpResponse", "coder_proto._rest.http"),
        ("coder_proto.adapter", "ToolPlan", "coder_proto._agent.tool_calls"),
    ],
)
def test_a_signature_type_is_the_defining_modules_object(face: str, name: str, module: str) -> None:
    assert getattr(importlib.import_module(face), name) is getattr(
        importlib.import_module(module), name
    )


def test_the_embedders_types_are_not_re_exported_by_the_adapters() -> None:
    """``AgentCore`` and ``HttpRequest`` belong with ``Connection`` (a loop of one's own); the
    wire values ``ActionToolCall`` and ``PortShare`` are every runtime's, like ``Chat``."""
    import coder_io_asyncio
    import coder_io_sync
    import coder_io_trio
    import coder_proto
    from coder_proto.adapter import EMBEDDER_NAMES, USER_NAMES

    for name in ("AgentCore", "HttpRequest"):
        assert name in EMBEDDER_NAMES and name not in USER_NAMES
    for adapter in (coder_io_asyncio, coder_io_trio, coder_io_sync):
        assert "AgentCore" not in adapter.__all__
        for name in ("ActionToolCall", "PortShare"):
            assert getattr(adapter, name) is getattr(coder_proto, name), (adapter, name)
