"""What a user can import from the core: ``coder_proto.__all__``, three public packages
(``coder_proto.durable``, ``coder_proto.transcript``, ``coder_proto.fake``) and the names a
runtime adapter uses (``coder_proto.adapter``); every other module is private (a leading
underscore somewhere in its dotted path)."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import coder_proto

PUBLIC_PACKAGES = (
    "coder_proto.durable",
    "coder_proto.transcript",
    "coder_proto.fake",
    "coder_proto.adapter",
)


def _modules() -> list[str]:
    return [m.name for m in pkgutil.walk_packages(coder_proto.__path__, "coder_proto.")]


def _is_private(name: str) -> bool:
    return any(part.startswith("_") for part in name.split(".")[1:])


def test_every_module_outside_the_public_packages_is_private() -> None:
    public = [name for name in _modules() if not _is_private(name)]
    stray = [name for name in public if name not in PUBLIC_PACKAGES]
    assert stray == [], f"public modules outside the public packages: {stray}"


@pytest.mark.parametrize("face", ["coder_proto", *PUBLIC_PACKAGES])
def test_every_exported_name_is_there_once(face: str) -> None:
    module = importlib.import_module(face)
    names = list(module.__all__)
    assert len(names) == len(set(names)), face
    missing = [name for name in names if not hasattr(module, name)]
    assert missing == [], f"{face}.__all__ names what it does not define: {missing}"


def test_a_name_exported_twice_is_one_object() -> None:
    """A name in two public faces (``coder_proto.crash_safe`` and
    ``coder_proto.durable.crash_safe``) is the same object there: two different things of one
    name would collide in a user's imports."""
    seen: dict[str, tuple[str, object]] = {}
    clashes = []
    for face in ("coder_proto", *PUBLIC_PACKAGES):
        module = importlib.import_module(face)
        for name in module.__all__:
            value = getattr(module, name)
            first = seen.setdefault(name, (face, value))
            if first[1] is not value:
                clashes.append(f"{first[0]}.{name} is not {face}.{name}")
    assert clashes == []


def test_the_core_exports_no_module() -> None:
    """``__all__`` holds values a user meets, never an implementation module."""
    modules = [n for n in coder_proto.__all__ if type(getattr(coder_proto, n)).__name__ == "module"]
    assert modules == []


def test_star_import_gives_exactly_the_curated_names() -> None:
    namespace: dict[str, object] = {}
    exec("from coder_proto import *", namespace)
    namespace.pop("__builtins__")
    assert sorted(namespace) == sorted(coder_proto.__all__)


def test_a_durable_job_is_reachable_from_the_public_names() -> None:
    """An embedder runs a durable machine on its own loop with public names only: the job
    (``coder_proto.durable.DurableWork``), the command its store calls come as
    (``coder_proto.ApplyStore``, carrying a ``StoreRequest`` and its ``StoreOp``) and the
    connection's answers. The embedder's vocabulary is not re-exported by the adapters."""
    from coder_proto import durable
    from coder_proto.adapter import EMBEDDER_NAMES, USER_NAMES

    for name in ("ApplyStore", "StoreRequest"):
        assert name in coder_proto.__all__ and name in EMBEDDER_NAMES and name not in USER_NAMES
    for name in ("DurableWork", "StoreOp"):
        assert name in durable.__all__, name
    for method in ("start_durable", "store_finished"):
        assert callable(getattr(coder_proto.Connection, method)), method
    assert not hasattr(coder_proto.Connection, "start_machine")
    assert coder_proto.ApplyStore.op.fget is not None  # the StoreOp of the call
    assert callable(durable.StoreOp.apply)


#: (public module, earlier name, current name): names that carried task, job, run or call
#: for another concept (docs/glossary.md) and were renamed; the old spelling still imports.
RENAMED = (
    ("coder_proto", "HttpCall", "HttpExchange"),  # earlier name, current name
    ("coder_proto", "ToolRun", "ToolBatch"),  # earlier name, current name
    ("coder_proto.durable", "DurableJob", "DurableWork"),  # earlier name, current name
    ("coder_proto.adapter", "Job", "MachineSlot"),  # earlier name, current name
    ("coder_proto.adapter", "Call", "Operation"),  # earlier name, current name
    ("coder_proto.adapter", "ChatCalls", "ChatOperations"),  # earlier name, current name
    ("coder_proto.adapter", "AgentCalls", "AgentOperations"),  # earlier name, current name
)


@pytest.mark.parametrize(("module", "old", "new"), RENAMED)
def test_an_earlier_name_is_the_same_object_as_its_current_name(
    module: str, old: str, new: str
) -> None:
    """Code written against an earlier name keeps working: both names are exported by the
    same public module and are one object, whose repr and docs use the current name."""
    face = importlib.import_module(module)
    assert old in face.__all__ and new in face.__all__
    assert getattr(face, old) is getattr(face, new)
    assert getattr(face, new).__name__ == new


def test_every_chat_route_the_fake_serves_has_a_client_method() -> None:
    """Every REST chat route of the current server (as the fake serves them, wire 2.4) is an
    operation of the raw client on every runtime, its answer types importable from the core
    and the adapters; the stream is the turn's own and a signed download needs no client."""
    import coder_io_asyncio
    import coder_io_sync
    import coder_io_trio
    from coder_proto.adapter import USER_NAMES
    from coder_proto.fake._routes import _CHAT_ROUTES

    reached_otherwise = {"stream_chat", "download_chat_file"}
    served = {op for _, _, op in _CHAT_ROUTES} - reached_otherwise
    for adapter in (coder_io_asyncio, coder_io_trio, coder_io_sync):
        missing = {op for op in served if not hasattr(adapter.CoderChatClient, op)}
        assert not missing, (adapter.__name__, missing)
    for name in ("ChatDiff", "ChatFileDownloadUrl", "ChatPrompt", "EditedMessage"):
        assert name in coder_proto.__all__ and name in USER_NAMES, name
        assert getattr(coder_io_asyncio, name) is getattr(coder_proto, name)
