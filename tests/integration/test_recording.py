"""Recording on every runtime (docs/transcripts.md): ``recorder=`` on ``CoderAgent`` and on
``CoderChatClient`` records what crosses the wire on asyncio, trio and blocking alike, and the
transcript replays offline through the core (``coder_proto.transcript.replay``) to the outcome the
user saw live, turn by turn, deterministically and without the session token (docs/architecture.md rule 6).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto import CoderAgentError
from coder_proto.fake import CallClientTool, Fail, Say, Script, Think, Wait
from coder_proto.transcript._format import parse_transcript
from coder_proto.transcript._recorder import TranscriptRecorder
from coder_proto.transcript._records import SessionCall, WsFrame
from coder_proto.transcript._replay import replay


def get_weather(city: str) -> dict[str, Any]:
    """Get the weather for a city."""
    return {"city": city, "temp_c": 21}


Scenario = Callable[[Any, FakeCoderServer, Any], Coroutine[Any, Any, list[Any]]]


async def plain(rt: Any, server: FakeCoderServer, agent: Any) -> list[Any]:
    server.config.scripts.push(Script([Say("A plain answer in a few words.")]))
    return [await rt.generate(agent, "hello")]


async def reasoning_stream(rt: Any, server: FakeCoderServer, agent: Any) -> list[Any]:
    server.config.scripts.push(Script([Think("Thinking it over."), Say("Forty-two.")]))
    streamed = await rt.stream(agent, "think")
    assert streamed.error is None
    return [streamed.result]


async def tool_loop(rt: Any, server: FakeCoderServer, agent: Any) -> list[Any]:
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
    return [await rt.generate(agent, "weather twice")]


async def drops(rt: Any, server: FakeCoderServer, agent: Any) -> list[Any]:
    server.config.scripts.push(
        Script([Say("Streamed through two drops, piece by piece.", chunk=3)])
    )
    server.faults.drop_stream_after_frames(3, times=2)
    return [await rt.generate(agent, "drop")]


async def two_turns_and_cleanup(rt: Any, server: FakeCoderServer, agent: Any) -> list[Any]:
    server.config.scripts.push(Script([Say("First.")]))
    server.config.scripts.push(Script([Say("Second.")]))
    first = await rt.generate(agent, "one")
    second = await rt.generate(agent, "two")
    archived = await rt.archive(agent)
    assert archived.archived
    return [first, second]


async def reset_between_turns(rt: Any, server: FakeCoderServer, agent: Any) -> list[Any]:
    server.config.scripts.push(Script([Say("On the first chat.")]))
    server.config.scripts.push(Script([Say("On a fresh chat.")]))
    first = await rt.generate(agent, "one")
    await rt.reset_session(agent)
    second = await rt.generate(agent, "two")
    assert second.chat_id != first.chat_id
    return [first, second]


async def error_event(rt: Any, server: FakeCoderServer, agent: Any) -> list[Any]:
    server.config.scripts.push(Script([Say("Starting"), Fail(message="provider exploded")]))
    streamed = await rt.stream(agent, "fail")
    return [streamed.result if streamed.error is None else streamed.error]


async def request_timeout(rt: Any, server: FakeCoderServer, agent: Any) -> list[Any]:
    server.config.scripts.push(Script([Say("slow"), Wait(3.0), Say("late")]))
    with pytest.raises(CoderAgentError) as info:
        await rt.generate(agent, "slow")
    return [info.value]


SCENARIOS: dict[str, tuple[Scenario, dict[str, Any]]] = {
    "plain": (plain, {}),
    "reasoning_stream": (reasoning_stream, {}),
    "client_tool_loop": (tool_loop, {}),
    "drops_and_redials": (drops, {}),
    "two_turns_and_cleanup": (two_turns_and_cleanup, {}),
    "reset_between_turns": (reset_between_turns, {}),
    "error_event": (error_event, {}),
    "request_timeout": (request_timeout, {"request_timeout": 0.3}),
}


def check_replay(text: str, token: str, live: list[Any]) -> Any:
    """The transcript holds no token and replays to the live outcomes, deterministically."""
    assert token not in text
    transcript = parse_transcript(text)
    assert transcript.of(WsFrame)
    result = replay(transcript)
    assert result.faithful, (result.divergences, [t.summary() for t in result.turns])
    assert len(result.turns) == len(live)
    for turn, outcome in zip(result.turns, live, strict=True):
        assert turn.recorded is not None and turn.matches_recording
        if isinstance(outcome, BaseException):
            assert type(turn.error) is type(outcome) and str(turn.error) == str(outcome)
        elif turn.error is not None:
            raise AssertionError(f"the replay failed where the live turn did not: {turn.error!r}")
        else:
            assert turn.result is not None and turn.result.text == outcome.text
            assert turn.result.finish_reason == outcome.finish_reason
            assert [c.tool_name for c in turn.result.tool_calls] == [
                c.tool_name for c in outcome.tool_calls
            ]
    assert replay(transcript).to_json() == result.to_json()
    return transcript


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_an_agents_recording_replays_to_the_live_outcome(
    runtime: Any, server: FakeCoderServer, name: str
) -> None:
    scenario, options = SCENARIOS[name]
    lines: list[str] = []

    async def run(rt: Any) -> list[Any]:
        recorder = TranscriptRecorder(lines.append)
        agent = await rt.agent(server, tools=[get_weather], recorder=recorder, **options)
        try:
            return await scenario(rt, server, agent)
        finally:
            await rt.close(agent)

    live = runtime.run(run)
    transcript = check_replay("".join(lines), server.token, live)
    if name == "two_turns_and_cleanup":
        calls = [c.name for c in transcript.of(SessionCall)]
        assert calls[:2] == ["archive", "dispose"]


def test_a_clients_recorder_records_the_agents_on_it(runtime: Any, server: FakeCoderServer) -> None:
    lines: list[str] = []
    server.config.scripts.push(
        Script([CallClientTool(name="get_weather", args={"city": "Rome"}), Say("Rome ok.")])
    )

    async def run(rt: Any) -> list[Any]:
        client = await rt.client(server, recorder=TranscriptRecorder(lines.append))
        agent = await rt.agent(
            server, client=client, base_url=None, token=None, tools=[get_weather]
        )
        try:
            return [await rt.generate(agent, "rome")]
        finally:
            await rt.close(agent)
            await rt.close_client(client)

    live = runtime.run(run)
    check_replay("".join(lines), server.token, live)
