"""What only the event-loop agent does, on asyncio and trio against the fake server: a
stream's life cycle (entered once, read inside its block, its final result kept), workspace
files from any source and an async writer, a plain tool that returns an awaitable, and a
closed client refusing new work."""

from __future__ import annotations

import io
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_io_asyncio import (
    CoderAgentError,
    TextContent,
    ToolMessage,
    ToolResultContent,
    UserMessage,
    tool,
)
from coder_proto.fake import CallClientTool, Say, Script


def test_a_stream_is_entered_once_read_inside_its_block_and_keeps_its_result(
    loop_runtime: Any, server: FakeCoderServer
) -> None:
    server.config.scripts.push(Script([Say("One short answer.")]))

    async def scenario(rt: Any) -> list[str]:
        agent = await rt.agent(server)
        stream = agent.stream("hello")
        states = [repr(stream)]
        with pytest.raises(CoderAgentError, match="inside `async with"):
            await stream.get_final_result()
        async with stream as entered:
            states.append(repr(entered))
            with pytest.raises(CoderAgentError, match="only once"):
                await stream.__aenter__()
            first = await entered.get_final_result()
            assert await entered.get_final_result() is first
            assert first.text == "One short answer."
        states.append(repr(stream))
        await rt.close(agent)
        return states

    assert loop_runtime.run(scenario) == [
        "<AgentStream not started>",
        "<AgentStream live>",
        "<AgentStream done>",
    ]


class AsyncFiles:
    """A ``workspace_files`` adapter whose ``write_file`` is a coroutine function."""

    workspace_id = "ws-1"

    def __init__(self) -> None:
        self.files: dict[str, bytes] = {}

    async def write_file(self, path: str, data: bytes) -> str:
        self.files[path] = data
        return f"/home/coder/{path}"


class AsyncReader:
    """A binary file object whose ``read`` is a coroutine function."""

    def __init__(self, data: bytes) -> None:
        self._data = data

    async def read(self) -> bytes:
        return self._data


def test_workspace_files_come_from_any_source_and_an_async_writer_is_awaited(
    loop_runtime: Any, server: FakeCoderServer
) -> None:
    files = AsyncFiles()

    async def scenario(rt: Any) -> list[Any]:
        agent = await rt.agent(server, workspace_id="ws-1", workspace_files=files)
        uploads = [
            await agent.upload_to_workspace(io.BytesIO(b"from a file"), "a.txt"),
            await agent.upload_to_workspace(AsyncReader(b"from a coroutine"), "b.txt"),
        ]
        await rt.close(agent)
        return uploads

    first, second = loop_runtime.run(scenario)
    assert (first.path, first.size) == ("/home/coder/a.txt", 11)
    assert (second.path, second.size) == ("/home/coder/b.txt", 16)
    assert files.files == {"a.txt": b"from a file", "b.txt": b"from a coroutine"}


def test_a_plain_tool_that_returns_an_awaitable_is_awaited_d5(
    loop_runtime: Any, server: FakeCoderServer
) -> None:
    async def lookup(city: str) -> dict[str, Any]:
        return {"city": city, "temp_c": 19}

    @tool
    def get_weather(city: str) -> Any:
        """Get the weather for a city."""
        return lookup(city)

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, tools=[get_weather])
        result = await rt.generate(agent, "What is the weather in Oslo?")
        await rt.close(agent)
        return result

    result = loop_runtime.run(scenario)
    assert result.text == 'get_weather returned {"city":"Oslo","temp_c":19}.'


def test_a_closed_client_refuses_new_work(loop_runtime: Any, server: FakeCoderServer) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        await rt.close_client(client)
        await rt.close_client(client)  # idempotent
        with pytest.raises(CoderAgentError, match="closed"):
            await client.list_chats()
        with pytest.raises(CoderAgentError, match="closed"):
            client.watch_chats()
        agent = rt.agent_class(client=client, organization_id=server.organization_id)
        await agent.aclose()  # nothing to dispose of on a closed client
        await agent.aclose()

    loop_runtime.run(scenario)


class BrokenFile:
    """A binary file object whose ``read`` fails, as a vanished network share does."""

    name = "report.pdf"

    def read(self) -> bytes:
        raise OSError("the share went away")


def test_a_bad_prompt_or_an_unreadable_file_fails_the_call_and_frees_the_agent(
    loop_runtime: Any, server: FakeCoderServer
) -> None:
    server.config.scripts.push(Script([Say("Still here.")]))

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        with pytest.raises(CoderAgentError, match="exactly one of them"):
            async with agent.stream("a prompt", messages=[{"role": "user", "content": "x"}]):
                pass
        with pytest.raises(CoderAgentError, match="cannot read the file to upload"):
            await agent.attach(BrokenFile(), media_type="application/pdf")
        # Neither call left the agent busy.
        result = await rt.generate(agent, "are you there?")
        await rt.close(agent)
        return result

    assert loop_runtime.run(scenario).text == "Still here."


def test_a_segment_leaves_the_pause_to_the_caller_and_resumes_on_tool_messages(
    loop_runtime: Any, server: FakeCoderServer
) -> None:
    """docs/tools.md "Running the tools yourself": one segment ends at the pause with the calls
    unrun; the next one submits the caller's results and reads the run to its end."""
    server.config.scripts.push(
        Script(
            [
                CallClientTool(name="get_weather", args={"city": "Oslo"}),
                Say("{tool_result.temp_c} C"),
            ]
        )
    )
    ran: list[str] = []

    @tool
    def get_weather(city: str) -> dict[str, Any]:
        """The weather."""
        ran.append(city)
        return {"temp_c": 21}

    async def scenario(rt: Any) -> tuple[Any, Any, list[str]]:
        agent = await rt.agent(server, tools=[get_weather])
        async with agent.segment("Weather in Oslo?") as paused:
            kinds = [type(part).__name__ async for part in paused]
            first = await paused.get_final_result()
        call = first.tool_calls[0]
        answer = ToolMessage(
            (ToolResultContent(tool_call_id=call.tool_call_id, output={"temp_c": 4}),)
        )
        async with agent.segment(
            messages=[UserMessage((TextContent("Weather in Oslo?"),)), answer]
        ) as s:
            second = await s.get_final_result()
        await rt.close(agent)
        return first, second, kinds

    first, second, kinds = loop_runtime.run(scenario)
    assert ran == []
    assert kinds[-2:] == ["ToolCall", "Finish"]
    assert first.finish_reason == "tool-calls"
    assert [c.tool_name for c in first.tool_calls] == ["get_weather"]
    assert second.finish_reason == "stop"
    assert second.text == "4 C"
    assert second.chat_id == first.chat_id


def test_an_agent_outlives_the_loop_it_started_on(
    loop_runtime: Any, server: FakeCoderServer
) -> None:
    """One loop per call (``asyncio.run`` each time, as a framework's ``run_sync`` does): the
    connections the first loop pooled cannot carry a request on the next, so the agent's own
    client takes new ones, and closing it on a third loop still archives the chat (a closing
    that sends only the archive, H.5, once met the dead loop's connection)."""
    server.config.scripts.push(Script([Say("First.")]))
    server.config.scripts.push(Script([Say("Second.")]))
    agents: list[Any] = []

    async def first(rt: Any) -> str:
        agents.append(await rt.agent(server))
        return (await agents[0].generate("one")).text

    async def second(rt: Any) -> str:
        return (await agents[0].generate("two")).text

    async def close(rt: Any) -> Any:
        await agents[0].aclose()
        return agents[0].chat_id

    assert loop_runtime.run(first) == "First."
    assert loop_runtime.run(second) == "Second."
    chat_id = loop_runtime.run(close)
    assert server.model.store.chats[chat_id].archived
