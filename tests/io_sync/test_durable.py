"""What only the blocking durable functions do (docs/durable-workflows.md; D5): nothing there runs
an event loop, so an async crash-safe tool gets an error result instead of running, and a
store whose plain methods hand back awaitables is refused. The behaviour every runtime
shares is ``tests/durable/test_runtimes.py``."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_io_sync import CoderAgent, DurableToolContext, bind_tools, crash_safe, run_turn
from coder_proto.durable import DurableStoreError, MemoryStore
from coder_proto.fake import CallClientTool, Say, Script


@crash_safe
async def async_charge(amount_cents: int, ctx: DurableToolContext) -> str:
    """An async crash-safe tool (refused by the blocking adapter)."""
    return "never"


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.0005, interrupt_delay=0.02) as fake:
        yield fake
        assert fake.wait_idle(5.0)


def test_an_async_crash_safe_tool_gets_an_error_result_d5(server: FakeCoderServer) -> None:
    server.config.scripts.add(
        r"Async",
        Script(
            (CallClientTool(name="async_charge", args={"amount_cents": 1}), Say("{tool_result}"))
        ),
    )
    store = MemoryStore()
    tools = bind_tools([async_charge], store=store)
    with CoderAgent(
        base_url=server.url,
        token=server.token,
        organization_id=server.organization_id,
        tools=tools,
    ) as agent:
        result = agent.generate("Pay asynchronously.")
    (outcome,) = result.steps[0].tool_results
    assert outcome.is_error and "coroutine function" in outcome.result
    # The write-ahead came first: the entry stays committing (the effect never ran).
    ((_key, entry),) = store.ledger.items()
    assert entry.state == "committing"


class AwaitingStore(MemoryStore):
    """Plain methods that return awaitables (an async driver behind a sync facade)."""

    def get_checkpoint(self, *args: Any) -> Any:
        async def later() -> None:
            return None

        return later()


def test_a_store_handing_back_awaitables_is_refused_before_anything_is_sent(
    server: FakeCoderServer,
) -> None:
    with pytest.raises(DurableStoreError, match="returned an awaitable"):
        run_turn(
            "wf-1",
            "Say hi.",
            store=AwaitingStore(),
            base_url=server.url,
            token=server.token,
            organization_id=server.organization_id,
        )
    assert server.model.chats == {}
