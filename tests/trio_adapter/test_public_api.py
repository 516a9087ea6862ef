"""The trio adapter offers the asyncio adapter's public names (issue 5: the same API on every
runtime), its own classes where the runtime matters, and the core's objects elsewhere."""

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
    """DESIGN "Public API": the same names on every runtime; the runtime-independent ones are
    the core's own objects (``coder_proto.public``), so one ``except`` works everywhere."""
    import coder_io_sync
    from coder_io_common import stores
    from coder_proto import public

    for adapter in (coder_io_asyncio, coder_io_trio, coder_io_sync):
        assert sorted(adapter.__all__) == sorted(
            [*public.__all__, *public.RUNTIME_NAMES, *stores.STORE_NAMES]
        )
        for name in public.__all__:
            assert getattr(adapter, name) is getattr(public, name), (adapter.__name__, name)
        for name in stores.STORE_NAMES:  # the stores belong to no runtime
            assert getattr(adapter, name) is getattr(stores, name), (adapter.__name__, name)
    for name in public.RUNTIME_NAMES:
        objects = {id(getattr(a, name)) for a in (coder_io_asyncio, coder_io_trio, coder_io_sync)}
        assert len(objects) == 3, name  # each runtime's own
