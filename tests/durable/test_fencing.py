"""Fencing tokens and the lease check of a crash-safe tool (D37) on every runtime, against the
fake server over loopback (docs/durable-workflows.md "Fence the effect").

A step's crash-safe tool sees the number its step's lease acquisition took, and its check
right before the effect passes while the step holds the lease. Another worker, played by the
test through the store's lease methods, takes the lease over from inside the tool: the check
then fails with ``WorkflowLeaseLostError`` and the effect does not happen. The check has a
blocking form (plain functions: the blocking adapter's, or a worker thread's on an event
loop) and an awaited one (coroutine functions on asyncio and trio)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto import CoderAgentError
from coder_proto.durable import (
    DurableToolContext,
    MemoryStore,
    WorkflowBusyError,
    WorkflowLeaseLostError,
    crash_safe,
)
from coder_proto.fake import CallClientTool, Say, Script

from .test_runtimes import options

#: What the tools saw and did, per test.
SEEN: dict[str, list[Any]] = {"tokens": [], "errors": [], "effects": []}
STORE: dict[str, Any] = {}


def _steal(ctx: DurableToolContext) -> None:
    """Another worker takes the step's lease over (far in the future: live for it)."""
    store: MemoryStore = STORE["store"]
    assert ctx.workflow_id is not None
    taken = store.acquire_lease(ctx.tenant, ctx.workflow_id, "new-holder", time.time() + 600, 60)
    assert taken.owner == "new-holder"


@crash_safe
def fenced_write(steal: bool, ctx: DurableToolContext) -> str:
    """Write the order's status, fenced."""
    SEEN["tokens"].append(ctx.fencing_token)
    if steal:
        _steal(ctx)
    try:
        ctx.check_lease()
    except CoderAgentError as exc:
        SEEN["errors"].append(exc)
        raise
    SEEN["effects"].append(ctx.idempotency_key)
    return f"written with token {ctx.fencing_token}"


@crash_safe
async def afenced_write(steal: bool, ctx: DurableToolContext) -> str:
    """Write the order's status, fenced, from a coroutine."""
    SEEN["tokens"].append(ctx.fencing_token)
    if steal:
        _steal(ctx)
    try:
        await ctx.acheck_lease()
    except CoderAgentError as exc:
        SEEN["errors"].append(exc)
        raise
    SEEN["effects"].append(ctx.idempotency_key)
    return f"written with token {ctx.fencing_token}"


@crash_safe
async def blocking_on_the_loop(ctx: DurableToolContext) -> str:
    """Call the blocking check on the event loop."""
    try:
        ctx.check_lease()
    except CoderAgentError as exc:
        SEEN["errors"].append(exc)
        raise
    return "unreachable"  # pragma: no cover - the check refuses


@crash_safe
def both_forms(ctx: DurableToolContext) -> str:
    """The blocking adapter's awaited form does the blocking check."""
    asyncio.run(ctx.acheck_lease())
    ctx.check_lease()
    SEEN["effects"].append(ctx.idempotency_key)
    return "checked twice"


class AsyncMemoryStore:
    """An ``AsyncDurableStore`` over a ``MemoryStore`` (an async database driver's shape)."""

    def __init__(self, inner: MemoryStore) -> None:
        self.inner = inner

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.inner, name)

        async def call(*args: Any) -> Any:
            return method(*args)

        return call


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    for seen in SEEN.values():
        seen.clear()
    with FakeCoderServer(chunk_delay=0.0005, interrupt_delay=0.02) as fake:
        scripts = fake.config.scripts
        for name in ("fenced_write", "afenced_write"):
            for steal in (False, True):
                scripts.add(
                    rf"\b{name} steal={steal}\b",
                    Script((CallClientTool(name=name, args={"steal": steal}), Say("{tool_result}"))),
                )
        scripts.add(r"blocking", Script((CallClientTool(name="blocking_on_the_loop"), Say("x"))))
        scripts.add(r"both", Script((CallClientTool(name="both_forms"), Say("{tool_result}"))))
        yield fake
        assert fake.wait_idle(5.0)


def _step(server: FakeCoderServer, store: Any, tool: Any, prompt: str, step: str) -> Any:
    return {
        "workflow_id": "wf-fenced",
        "prompt": prompt,
        "step": step,
        "lease_duration": 30.0,
        **options(server, store, tools=[tool]),
    }


def _tools_for(runtime: Any) -> list[Any]:
    """The fenced tools a runtime runs: plain ones everywhere, coroutines on event loops."""
    return [fenced_write] if runtime.name == "sync" else [fenced_write, afenced_write]


def test_a_tool_sees_its_steps_fencing_token_and_its_check_passes_d37(
    runtime: Any, server: FakeCoderServer
) -> None:
    """Each step of the workflow takes the lease anew: its tool sees the next number, the
    one the store gave that acquisition, and the check before its effect passes."""
    store = MemoryStore()
    STORE["store"] = store
    tools = _tools_for(runtime)

    async def scenario(rt: Any) -> list[str]:
        texts = []
        for n, tool in enumerate(tools):
            kwargs = _step(server, store, tool, f"{tool.name} steal=False", f"write-{n}")
            result = await rt.durable("run_turn", **kwargs)
            texts.append(result.text)
        return texts

    texts = runtime.run(scenario)
    assert texts == [f'"written with token {n + 1}"' for n in range(len(tools))]
    assert SEEN["tokens"] == [n + 1 for n in range(len(tools))]
    assert len(SEEN["effects"]) == len(tools) and SEEN["errors"] == []
    assert store.fences == {("default", "wf-fenced"): len(tools)}
    assert store.get_lease("default", "wf-fenced") is None  # released after each step


def test_a_tool_whose_lease_was_taken_over_fails_its_check_before_the_effect_d37(
    runtime: Any, server: FakeCoderServer
) -> None:
    """Another worker takes the lease over while the tool runs: the check fails with
    ``WorkflowLeaseLostError`` naming the new holder, the effect does not happen, and the
    step ends with that error, leaving the new holder's lease in place."""
    tools = _tools_for(runtime)

    async def scenario(rt: Any) -> None:
        for tool in tools:
            store = STORE["store"] = MemoryStore()
            kwargs = _step(server, store, tool, f"{tool.name} steal=True", "write")
            with pytest.raises(WorkflowLeaseLostError) as lost:
                await rt.durable("run_turn", **kwargs)
            assert lost.value.retryable and isinstance(lost.value, WorkflowBusyError)
            lease = store.get_lease("default", "wf-fenced")
            assert lease is not None and (lease.owner, lease.fencing_token) == ("new-holder", 2)

    runtime.run(scenario)
    assert SEEN["effects"] == []
    assert SEEN["tokens"] == [1] * len(tools)
    assert len(SEEN["errors"]) == len(tools)
    for error in SEEN["errors"]:
        assert isinstance(error, WorkflowLeaseLostError)
        assert error.owner == "new-holder" and "fencing token 2; this step's is 1" in str(error)


def test_the_blocking_check_is_refused_on_the_event_loop_d37(
    loop_runtime: Any, server: FakeCoderServer
) -> None:
    """A coroutine tool must await ``acheck_lease()``: the blocking form would stall the
    loop (and, with an async store, wait on it forever), so it is refused at once."""
    store = STORE["store"] = MemoryStore()

    async def scenario(rt: Any) -> Any:
        kwargs = _step(server, store, blocking_on_the_loop, "blocking", "loop")
        return await rt.durable("run_turn", **kwargs)

    loop_runtime.run(scenario)
    (error,) = SEEN["errors"]
    assert type(error) is CoderAgentError and "await ctx.acheck_lease()" in str(error)


def test_a_plain_tool_cannot_check_through_an_async_store_d37(
    loop_runtime: Any, server: FakeCoderServer
) -> None:
    """A plain tool function runs in a worker thread, where an ``AsyncDurableStore``'s
    coroutines cannot run: its check is refused with what to do instead. Awaited from a
    coroutine tool, the same store answers the check."""
    memory = STORE["store"] = MemoryStore()
    store = AsyncMemoryStore(memory)

    async def scenario(rt: Any) -> Any:
        plain = _step(server, store, fenced_write, "fenced_write steal=False", "plain")
        await rt.durable("run_turn", **plain)
        awaited = _step(server, store, afenced_write, "afenced_write steal=False", "awaited")
        return await rt.durable("run_turn", **awaited)

    result = loop_runtime.run(scenario)
    (error,) = SEEN["errors"]
    assert type(error) is CoderAgentError and "AsyncMemoryStore" in str(error)
    assert "await ctx.acheck_lease()" in str(error)
    assert result.text == '"written with token 2"' and len(SEEN["effects"]) == 1


def test_the_blocking_adapters_awaited_check_blocks_d37(server: FakeCoderServer) -> None:
    """The blocking adapter runs plain functions only; ``acheck_lease()`` run there (on an
    event loop of the tool's own) makes the same check."""
    from coder_io_sync.durable import run_turn

    store = STORE["store"] = MemoryStore()
    result = run_turn(**_step(server, store, both_forms, "both", "both"))
    assert result.text == '"checked twice"' and len(SEEN["effects"]) == 1
