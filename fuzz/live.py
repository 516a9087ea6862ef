"""Live seed transcripts: scenarios run by ``CoderAgent`` against ``FakeCoderServer`` over
loopback with a ``TranscriptRecorder`` (``python -m fuzz.seeds --live`` writes them to
``fuzz/corpus/live_*.jsonl``; ``tests/integration/test_transcripts.py`` replays them)."""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

from coder_integrations.fake_server import FakeCoderServer
from coder_io_asyncio import CoderAgent
from coder_proto import CoderAgentError
from coder_proto.fake import CallClientTool, CallServerTool, Cite, Fail, Say, Script, Think, Wait
from coder_proto.transcript import TranscriptRecorder

__all__ = ["SCENARIOS", "record_live"]

FAST: dict[str, Any] = {"chunk_delay": 0.0005, "interrupt_delay": 0.05}


def get_weather(city: str) -> dict[str, Any]:
    """Get the weather for a city."""
    return {"city": city, "temp_c": 21}


Scenario = Callable[[FakeCoderServer, CoderAgent], Coroutine[Any, Any, None]]


async def _plain(server: FakeCoderServer, agent: CoderAgent) -> None:
    server.config.scripts.push(Script([Say("A plain answer in a few words.")]))
    await agent.generate("hello")


async def _reasoning_stream(server: FakeCoderServer, agent: CoderAgent) -> None:
    server.config.scripts.push(Script([Think("Thinking it over."), Say("Forty-two.")]))
    async with agent.stream("think") as stream:
        async for _ in stream:
            pass


async def _tool_loop(server: FakeCoderServer, agent: CoderAgent) -> None:
    server.config.scripts.push(
        Script(
            [
                CallClientTool(name="get_weather", args={"city": "Paris"}),
                Say("Paris: {tool_result}."),
                CallClientTool(name="get_weather", args={"city": "Oslo"}),
                Say("Oslo: {tool_result}."),
            ]
        )
    )
    await agent.generate("weather twice")


async def _server_tools(server: FakeCoderServer, agent: CoderAgent) -> None:
    server.config.scripts.push(
        Script(
            [
                CallServerTool(name="read_file", args={"path": "a"}, result={"ok": True}),
                Cite(url="https://example.com", title="Example"),
                Say("Read it."),
            ]
        )
    )
    await agent.generate("read")


async def _drops(server: FakeCoderServer, agent: CoderAgent) -> None:
    server.config.scripts.push(
        Script([Say("Streamed through two drops, piece by piece.", chunk=3)])
    )
    server.faults.drop_stream_after_frames(3, times=2)
    await agent.generate("drop")


async def _session_error(server: FakeCoderServer, agent: CoderAgent) -> None:
    server.config.scripts.push(Script([Say("Streamed after a failed stream session.", chunk=3)]))
    server.faults.fail_snapshots(times=1)  # D34: a dropped connection, redialed
    await agent.generate("session")


async def _two_turns(server: FakeCoderServer, agent: CoderAgent) -> None:
    server.config.scripts.push(Script([Say("First.")]))
    server.config.scripts.push(Script([Say("Second.")]))
    await agent.generate("one")
    await agent.generate("two")


async def _lost_action_required(server: FakeCoderServer, agent: CoderAgent) -> None:
    server.config.scripts.push(
        Script([CallClientTool(name="get_weather", args={"city": "Rome"}), Say("Rome ok.")])
    )
    server.faults.drop_stream_at("action_required", close_code=1001)
    await agent.generate("rome")


async def _error(server: FakeCoderServer, agent: CoderAgent) -> None:
    server.config.scripts.push(Script([Say("Starting"), Fail(message="provider exploded")]))
    async with agent.stream("fail") as stream:
        async for _ in stream:
            pass


async def _timeout(server: FakeCoderServer, agent: CoderAgent) -> None:
    server.config.scripts.push(Script([Say("slow"), Wait(3.0), Say("late")]))
    try:
        await agent.generate("slow")
    except CoderAgentError:
        pass  # the request_timeout (C.3)


SCENARIOS: dict[str, tuple[Scenario, dict[str, Any]]] = {
    "plain": (_plain, {}),
    "reasoning_stream": (_reasoning_stream, {}),
    "client_tool_loop": (_tool_loop, {}),
    "server_tools": (_server_tools, {}),
    "drops_and_redials": (_drops, {}),
    "session_error": (_session_error, {}),
    "two_turns": (_two_turns, {}),
    "lost_action_required": (_lost_action_required, {}),
    "error": (_error, {}),
    "timeout": (_timeout, {"request_timeout": 0.3}),
}


async def _record(name: str) -> tuple[str, str]:
    scenario, options = SCENARIOS[name]
    lines: list[str] = []
    async with FakeCoderServer(**FAST) as server:
        async with CoderAgent(
            base_url=server.url,
            token=server.token,
            organization_id=server.organization_id,
            tools=[get_weather],
            recorder=TranscriptRecorder(lines.append),
            **options,
        ) as agent:
            await scenario(server, agent)
        token = server.token
    return "".join(lines), token


async def record_live(name: str) -> tuple[str, str]:
    """Run live scenario ``name``; return ``(transcript text, the server's token)``."""
    scenario, options = SCENARIOS[name]
    lines: list[str] = []
    async with FakeCoderServer(**FAST) as server:
        async with CoderAgent(
            base_url=server.url,
            token=server.token,
            organization_id=server.organization_id,
            tools=[get_weather],
            recorder=TranscriptRecorder(lines.append),
            **options,
        ) as agent:
            await scenario(server, agent)
        token = server.token
    return "".join(lines), token
