"""``CoderAgent.segment``: one model round trip that stops at a client-tool pause without running
the tool, and a segment whose prompt ends in tool results resumes the paused chat (G.2, H.6), on
asyncio and on trio."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

import pytest
import trio

import coder_io_asyncio
import coder_io_sync
import coder_io_trio
from coder_integrations.fake_server import FakeCoderServer
from coder_integrations.pytest_plugin import FakeCoder
from coder_io_asyncio import TextDelta, ToolMessage, ToolResultContent, tool
from coder_proto.fake import CallClientTool, Say, Script

ran: list[str] = []


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Get the weather for a city."""
    ran.append(city)
    return {"city": city, "temp_c": 21}


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.0) as server:
        server.config.scripts.add(
            r"weather in (?P<city>\w+)",
            Script(
                [
                    CallClientTool(name="get_weather", args={"city": "{city}"}),
                    Say("{city}: {tool_result.temp_c} degrees."),
                ]
            ),
        )
        yield server


async def _pause_and_resume(module: Any, server: FakeCoderServer) -> None:
    fake = FakeCoder(server)
    async with module.CoderAgent(
        base_url=server.url,
        token=server.token,
        organization_id=server.organization_id,
        tools=[get_weather],
    ) as agent:
        async with agent.segment("What is the weather in Paris?") as stream:
            parts = [part async for part in stream]
            paused = await stream.get_final_result()
        assert paused.finish_reason == "tool-calls"
        (call,) = paused.tool_calls
        assert (call.tool_name, call.input) == ("get_weather", '{"city":"Paris"}')
        assert ran == []  # the caller's loop runs the tool, not the agent
        assert fake.chat(paused.chat_id).status == "requires_action"
        assert any(getattr(p, "tool_call_id", None) == call.tool_call_id for p in parts)

        results = ToolMessage(
            (ToolResultContent(tool_call_id=call.tool_call_id, output={"temp_c": 21}),)
        )
        async with agent.segment([results]) as stream:
            text = "".join([p.delta async for p in stream if isinstance(p, TextDelta)])
            done = await stream.get_final_result()
        assert text == done.text == "Paris: 21 degrees."
        assert (done.finish_reason, done.chat_id) == ("stop", paused.chat_id)
        fake.assert_tool_result("get_weather", {"temp_c": 21})
        assert ran == []


RUNNERS: dict[str, Callable[[Callable[[], Awaitable[None]]], None]] = {
    "asyncio": lambda f: asyncio.run(f()),  # type: ignore[arg-type]
    "trio": trio.run,
}


@pytest.mark.parametrize(
    ("module", "runner"), [(coder_io_asyncio, "asyncio"), (coder_io_trio, "trio")]
)
def test_a_segment_stops_at_the_pause_and_the_next_resumes_it(
    module: Any, runner: str, server: FakeCoderServer
) -> None:
    RUNNERS[runner](lambda: _pause_and_resume(module, server))


def test_a_blocking_segment_stops_at_the_pause_and_the_next_resumes_it(
    server: FakeCoderServer,
) -> None:
    fake = FakeCoder(server)
    with coder_io_sync.CoderAgent(
        base_url=server.url,
        token=server.token,
        organization_id=server.organization_id,
        tools=[get_weather],
    ) as agent:
        with agent.segment("What is the weather in Oslo?", timeout=30) as stream:
            paused = stream.get_final_result()
        assert paused.finish_reason == "tool-calls"
        (call,) = paused.tool_calls
        assert fake.chat(paused.chat_id).status == "requires_action"
        results = ToolMessage(
            (ToolResultContent(tool_call_id=call.tool_call_id, output={"temp_c": 21}),)
        )
        with agent.segment(messages=[results]) as stream:
            text = "".join(stream.text_stream)
        assert text == "Oslo: 21 degrees."
        assert ran == []
