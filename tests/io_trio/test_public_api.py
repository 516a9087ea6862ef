"""The trio adapter offers the asyncio adapter's public names (docs/architecture.md "Public API": the same API on
every runtime), its own classes where the runtime matters, and the core's objects elsewhere."""

from __future__ import annotations

import coder_io_asyncio
import coder_io_trio


def test_trio_exports_exactly_the_asyncio_names() -> None:
    assert sorted(coder_io_trio.__all__) == sorted(coder_io_asyncio.__all__)
    for name in coder_io_trio.__all__:
        assert hasattr(coder_io_trio, name), name


def test_runtime_classes_are_trio_ones_and_the_rest_is_shared() -> None:
    runtime_bound = {
        "CoderAgent",
        "AgentStream",
        "CoderChatClient",
        "ChatWatch",
        "watch_chats",
        "run_turn",
        "archive_workflow",
        "sweep_orphans",
        "bind_tools",
    }
    for name in runtime_bound:
        assert getattr(coder_io_trio, name) is not getattr(coder_io_asyncio, name), name
    for name in set(coder_io_trio.__all__) - runtime_bound:
        assert getattr(coder_io_trio, name) is getattr(coder_io_asyncio, name), name


def test_every_adapter_exports_the_cores_public_names_and_its_own_runtime_names() -> None:
    """docs/architecture.md "Public API": the same names on every runtime; the runtime-independent ones are
    the core's own objects (``coder_proto.__all__``), so one ``except`` works everywhere."""
    import coder_io_sync
    import coder_proto
    from coder_io_common import stores
    from coder_proto.adapter import EMBEDDER_NAMES, RUNTIME_NAMES

    user_names = [n for n in coder_proto.__all__ if n not in EMBEDDER_NAMES]
    assert set(EMBEDDER_NAMES) <= set(coder_proto.__all__)
    for adapter in (coder_io_asyncio, coder_io_trio, coder_io_sync):
        # The embedder's object is for loops of one's own; an adapter's users never meet it.
        assert sorted(adapter.__all__) == sorted(
            [*user_names, *RUNTIME_NAMES, *stores.STORE_NAMES]
        )
        for name in user_names:
            assert getattr(adapter, name) is getattr(coder_proto, name), (adapter.__name__, name)
        for name in stores.STORE_NAMES:  # the stores belong to no runtime
            assert getattr(adapter, name) is getattr(stores, name), (adapter.__name__, name)
    for name in RUNTIME_NAMES:
        objects = {id(getattr(a, name)) for a in (coder_io_asyncio, coder_io_trio, coder_io_sync)}
        assert len(objects) == 3, name  # each runtime's own


def test_the_trio_classes_and_functions_have_the_asyncio_signatures() -> None:
    """Both are the one async layer on their runtime: the same methods, with the same
    parameters, and a docstring of their own."""
    import inspect

    for name in ("CoderAgent", "AgentStream", "CoderChatClient", "ChatWatch"):
        trio_cls, asyncio_cls = getattr(coder_io_trio, name), getattr(coder_io_asyncio, name)
        public = {n for n in dir(asyncio_cls) if not n.startswith("_") or n.startswith("__a")}
        assert public == {n for n in dir(trio_cls) if not n.startswith("_") or n.startswith("__a")}
        for method in public:
            if callable(getattr(asyncio_cls, method)):
                assert inspect.signature(getattr(trio_cls, method)) == inspect.signature(
                    getattr(asyncio_cls, method)
                ), (name, method)
        assert trio_cls.__doc__ and trio_cls.__doc__ != asyncio_cls.__doc__, name
    for name in ("watch_chats", "run_turn", "archive_workflow", "sweep_orphans", "bind_tools"):
        trio_fn, asyncio_fn = getattr(coder_io_trio, name), getattr(coder_io_asyncio, name)
        assert inspect.signature(trio_fn) == inspect.signature(asyncio_fn), name
        assert inspect.iscoroutinefunction(trio_fn) == inspect.iscoroutinefunction(asyncio_fn)
    assert coder_io_trio.bind_tools.__module__ == "coder_io_trio.durable"
