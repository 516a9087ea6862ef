"""The blocking adapter has the public API of the asyncio one (docs/architecture.md "Public API": switching
runtime is an import change): the same names, the same methods with the same parameters
(blocking ``close`` / ``with`` / ``for`` in place of ``aclose`` / ``async with`` /
``async for``), plus the caller's ``timeout=`` where the blocking adapter has no other way to
cancel."""

from __future__ import annotations

import inspect
from typing import Any

import pytest

import coder_io_asyncio
import coder_io_sync

#: asyncio names with no blocking counterpart (none today).
ASYNCIO_ONLY: frozenset[str] = frozenset()
#: Blocking spellings of the asyncio protocol methods.
RENAMED = {
    "aclose": "close",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
}
#: Parameters only the blocking adapter has: the caller's deadline (D22).
SYNC_ONLY_PARAMETERS = {
    ("CoderAgent", "generate"): {"timeout"},
    ("CoderAgent", "stream"): {"timeout"},
    ("CoderAgent", "segment"): {"timeout"},
    ("CoderAgent", "archive"): {"timeout"},
    ("AgentStream", "__init__"): {"timeout"},
    ("run_turn", None): {"timeout"},
}
CLASSES = ["CoderAgent", "AgentStream", "CoderChatClient", "ChatWatch"]
FUNCTIONS = [
    "watch_chats",
    "run_turn",
    "archive_workflow",
    "sweep_orphans",
    "bind_tools",
    "crash_safe",
    "tool",
]


def test_the_public_names_are_the_asyncio_ones() -> None:
    assert set(coder_io_sync.__all__) == set(coder_io_asyncio.__all__) - ASYNCIO_ONLY
    for name in coder_io_sync.__all__:
        assert hasattr(coder_io_sync, name), name


def test_shared_values_are_the_same_objects() -> None:
    """Errors, parts, results and ``tool`` come from the core: one ``except`` clause or
    ``isinstance`` check works for every runtime."""
    own = {"AgentStream", "ChatWatch", "CoderAgent", "CoderChatClient", *FUNCTIONS} - {
        "crash_safe",
        "tool",
    }
    for name in set(coder_io_sync.__all__) - own:
        assert getattr(coder_io_sync, name) is getattr(coder_io_asyncio, name), name


def public_methods(cls: type) -> set[str]:
    names = {n for n in dir(cls) if not n.startswith("_")}
    names |= {n for n in RENAMED.values() if hasattr(cls, n)} | {
        n for n in RENAMED if hasattr(cls, n)
    }
    return {RENAMED.get(n, n) for n in names}


@pytest.mark.parametrize("name", CLASSES)
def test_the_classes_have_the_same_methods(name: str) -> None:
    asyncio_cls = getattr(coder_io_asyncio, name)
    sync_cls = getattr(coder_io_sync, name)
    assert public_methods(sync_cls) == public_methods(asyncio_cls)


def parameters(func: Any) -> list[str]:
    return [p for p in inspect.signature(func).parameters if p != "self"]


@pytest.mark.parametrize("name", CLASSES)
def test_the_methods_take_the_same_parameters(name: str) -> None:
    asyncio_cls = getattr(coder_io_asyncio, name)
    sync_cls = getattr(coder_io_sync, name)
    for method in sorted(public_methods(asyncio_cls) | {"__init__"}):
        asyncio_name = next((a for a, s in RENAMED.items() if s == method), method)
        theirs = getattr(asyncio_cls, asyncio_name, None) or getattr(asyncio_cls, method)
        ours = getattr(sync_cls, method)
        if isinstance(theirs, property) or not callable(theirs):
            assert isinstance(ours, property) or not callable(ours), method
            continue
        extra = SYNC_ONLY_PARAMETERS.get((name, method), set())
        assert [p for p in parameters(ours) if p not in extra] == parameters(theirs), method


@pytest.mark.parametrize("name", FUNCTIONS)
def test_the_functions_take_the_same_parameters(name: str) -> None:
    extra = SYNC_ONLY_PARAMETERS.get((name, None), set())
    ours = [p for p in parameters(getattr(coder_io_sync, name)) if p not in extra]
    assert ours == parameters(getattr(coder_io_asyncio, name))


def test_nothing_public_is_a_coroutine_function() -> None:
    for name in CLASSES:
        cls = getattr(coder_io_sync, name)
        for attribute in dir(cls):
            value = getattr(cls, attribute)
            assert not inspect.iscoroutinefunction(value), f"{name}.{attribute}"
            assert not inspect.isasyncgenfunction(value), f"{name}.{attribute}"
    for name in FUNCTIONS:
        assert not inspect.iscoroutinefunction(getattr(coder_io_sync, name)), name


def test_importing_the_blocking_adapter_starts_no_event_loop_machinery() -> None:
    """The blocking adapter's own modules never import an event-loop runtime."""
    import ast
    from pathlib import Path

    package = Path(coder_io_sync.__file__).parent
    for path in ["__init__.py", "_driver.py", "agent.py", "client.py", "watch.py", "durable.py"]:
        tree = ast.parse((package / path).read_text())
        imported = {
            alias.name.partition(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.Import)
            for alias in node.names
        } | {
            (node.module or "").partition(".")[0]
            for node in ast.walk(tree)
            if isinstance(node, ast.ImportFrom)
        }
        assert not imported & {"asyncio", "trio", "anyio", "coder_io_asyncio"}, path
