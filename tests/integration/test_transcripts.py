"""Record live sessions against the fake server over loopback, replay them offline through the
core, and compare (issue "Transcripts"; docs/transcripts.md). Every recorded transcript of a
full session is scanned for the session token (DESIGN rule 6)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from coder_io_asyncio import CoderAgent
from coder_io_asyncio.fake_server import FakeCoderServer
from coder_proto.fake import CallClientTool, CallServerTool, Cite, Fail, Say, Script, Think, Wait
from coder_proto.replay import replay
from coder_proto.transcript import TranscriptRecorder, WsFrame, parse_transcript

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
    server.config.scripts.push(Script([Say("Streamed through two drops, piece by piece.", chunk=3)]))
    server.faults.drop_stream_after_frames(3, times=2)
    await agent.generate("drop")


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
    with pytest.raises(Exception, match="timed out|timeout"):
        await agent.generate("slow")


SCENARIOS: dict[str, tuple[Scenario, dict[str, Any]]] = {
    "plain": (_plain, {}),
    "reasoning_stream": (_reasoning_stream, {}),
    "client_tool_loop": (_tool_loop, {}),
    "server_tools": (_server_tools, {}),
    "drops_and_redials": (_drops, {}),
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


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_a_live_session_replays_offline_to_the_same_outcome(name: str) -> None:
    text, token = asyncio.run(_record(name))
    assert token not in text
    transcript = parse_transcript(text)
    assert transcript.of(WsFrame)
    result = replay(transcript)
    assert result.turns
    for turn in result.turns:
        assert turn.recorded is not None
        assert turn.matches_recording, (turn.summary(), turn.recorded, result.divergences)
    again = replay(transcript)
    assert again.to_json() == result.to_json()


def test_coder_agent_run_records_and_replay_prints_the_outcome(tmp_path: Any) -> None:
    """``coder-agent run PROMPT --fake --record FILE`` then ``coder-agent replay FILE``."""
    path = tmp_path / "session.jsonl"
    run = subprocess.run(
        [sys.executable, "-m", "coder_io_sync.cli", "run", "hello there", "--fake", "--record", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    transcript = parse_transcript(path.read_text(encoding="utf-8"))
    assert transcript.of(WsFrame)
    shown = subprocess.run(
        [sys.executable, "-m", "coder_io_sync.cli", "replay", str(path), "--json"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert shown.returncode == 0, shown.stderr
    data = json.loads(shown.stdout)
    assert data["turns"][0]["matches_recording"] is True
    assert data["turns"][0]["text"]
    assert "parts" not in data["turns"][0]
    parts = subprocess.run(
        [sys.executable, "-m", "coder_io_sync.cli", "replay", str(path), "--parts"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert parts.returncode == 0, parts.stderr
    assert "text-delta" in parts.stdout
    assert "finish" in parts.stdout
