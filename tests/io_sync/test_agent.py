"""``CoderAgent`` on the blocking adapter: what the integration scenarios do not reach (stream
misuse, workspace uploads, the caller's ``timeout=`` on a stream, argument checks) and
transcripts recorded by the blocking driver that replay offline to the same outcome
(docs/transcripts.md)."""

from __future__ import annotations

import io
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import coder_io_asyncio
from coder_integrations.fake_server import FakeCoderServer
from coder_io_sync import (
    CoderAgent,
    CoderAgentError,
    CoderChatClient,
    TextDelta,
    ToolMessage,
    ToolResultContent,
    tool,
)
from coder_proto.fake import CallClientTool, Fail, Say, Script, Think, Wait
from coder_proto.transcript._format import parse_transcript
from coder_proto.transcript._recorder import TranscriptRecorder
from coder_proto.transcript._records import WsFrame
from coder_proto.transcript._replay import replay


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.0005, interrupt_delay=0.02) as fake:
        fake.config.scripts.add("stuck", Script((Say("thinking"), Wait(30.0))))
        yield fake
        assert fake.wait_idle(5.0)


def agent_for(server: FakeCoderServer, **kwargs: Any) -> CoderAgent:
    kwargs.setdefault("base_url", server.url)
    kwargs.setdefault("token", server.token)
    kwargs.setdefault("organization_id", server.organization_id)
    kwargs.setdefault("settle_retry_delay", 0.05)
    return CoderAgent(**kwargs)


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Get the weather for a city."""
    return {"city": city, "temp_c": 21}


# -- construction ---------------------------------------------------------------------------------


def test_a_client_of_another_runtime_is_refused(server: FakeCoderServer) -> None:
    other = coder_io_asyncio.CoderChatClient(server.url, server.token)
    with pytest.raises(CoderAgentError, match="coder_io_sync CoderChatClient"):
        CoderAgent(client=other)  # type: ignore[arg-type]
    with pytest.raises(CoderAgentError, match="plain function"):

        async def hook(event: Any) -> None:
            pass

        agent_for(server, on_transport_event=hook)


@pytest.mark.parametrize("timeout", [-1.0, "soon", float("nan")])
def test_a_bad_timeout_fails_before_anything_is_sent(server: FakeCoderServer, timeout: Any) -> None:
    with agent_for(server) as agent:
        with pytest.raises(CoderAgentError, match="timeout"):
            agent.generate("hi", timeout=timeout)
        with pytest.raises(CoderAgentError, match="timeout"):
            agent.stream("hi", timeout=timeout)
        # The failed call left the agent free (single flight, G.2).
        assert agent.generate("are you there?").text == "You said: are you there?"
    assert server.counters.requests["create_chat"] == 1


# -- streams ----------------------------------------------------------------------------------------


def test_a_stream_is_used_inside_its_with_block_and_entered_once(server: FakeCoderServer) -> None:
    with agent_for(server) as agent:
        stream = agent.stream("ping pong")
        assert "not started" in repr(stream)
        with pytest.raises(CoderAgentError, match="inside"):
            list(stream)
        with stream:
            assert "live" in repr(stream) or "done" in repr(stream)
            first = stream.get_final_result()
            assert stream.get_final_result() is first  # drained once, kept
            assert list(stream) == []  # every part went to the final result's drain
        assert "done" in repr(stream)
        with pytest.raises(CoderAgentError, match="only once"), stream:
            pass
    assert first.text == "You said: ping pong"


def test_parts_are_delivered_once_to_whichever_lens_reads_them(server: FakeCoderServer) -> None:
    server.config.scripts.add(
        "think", Script((Think("Pondering."), Say(" ".join(f"w{i}" for i in range(20)))))
    )
    with agent_for(server) as agent, agent.stream("think it over") as stream:
        parts = iter(stream)
        head = [next(parts) for _ in range(3)]
        deltas = list(stream.text_stream)
        result = stream.get_final_result()
    text = "".join(p.delta for p in head if type(p) is TextDelta) + "".join(deltas)
    assert text == result.text and result.reasoning == "Pondering."


def test_a_stream_timeout_interrupts_the_run_and_raises_timeout_error_d22(
    server: FakeCoderServer,
) -> None:
    with agent_for(server) as agent:
        seen: list[str] = []
        with pytest.raises(TimeoutError), agent.stream("stuck", timeout=0.4) as stream:
            seen.extend(stream.text_stream)
        assert seen == ["thinking"]
        assert agent.client.driver.wait_background(5.0)
        assert server.counters.requests["interrupt_chat"] == 1
        # A generous timeout changes nothing for a turn that finishes.
        with agent.stream("quick one", timeout=30) as stream:
            assert stream.get_final_result().text == "You said: quick one"


def test_a_failed_run_raises_from_the_iteration(server: FakeCoderServer) -> None:
    server.config.scripts.add("boom", Script((Say("partial"), Fail(message="exploded"))))
    server.faults.drop_stream_after_frames(1)
    with agent_for(server, request_timeout=0.5) as agent, agent.stream("stuck") as stream:
        with pytest.raises(CoderAgentError) as info:
            for _ in stream:
                pass
    assert info.value.retryable


# -- workspace files ------------------------------------------------------------------------------


class Workspace:
    def __init__(self, workspace_id: str, *, asynchronous: bool = False) -> None:
        self.workspace_id = workspace_id
        self.asynchronous = asynchronous
        self.files: dict[str, bytes] = {}

    def write_file(self, path: str, data: bytes) -> Any:
        if self.asynchronous:

            async def later() -> str:
                return path

            return later()
        self.files[path] = data
        return None


def test_upload_to_workspace_takes_bytes_paths_and_file_objects(
    server: FakeCoderServer, tmp_path: Path
) -> None:
    blob = tmp_path / "blob.bin"
    blob.write_bytes(b"\x00" * 100)
    files = Workspace("ws-1")
    with agent_for(server, workspace_id="ws-1", workspace_files=files) as agent:
        assert agent.upload_to_workspace(b"abc", "a.txt").size == 3
        assert agent.upload_to_workspace(blob, "b.bin").path == "b.bin"
        assert agent.upload_to_workspace(io.BytesIO(b"xyz"), "c.txt").size == 3
        with pytest.raises(CoderAgentError, match="cannot read"):
            agent.upload_to_workspace(tmp_path / "missing", "d.txt")
        with pytest.raises(CoderAgentError, match="binary mode"):
            agent.upload_to_workspace(io.StringIO("text"), "e.txt")
    assert files.files == {"a.txt": b"abc", "b.bin": b"\x00" * 100, "c.txt": b"xyz"}


def test_an_async_workspace_adapter_is_refused(server: FakeCoderServer) -> None:
    files = Workspace("ws-1", asynchronous=True)
    with agent_for(server, workspace_id="ws-1", workspace_files=files) as agent:
        with pytest.raises(CoderAgentError, match="plain method"):
            agent.upload_to_workspace(b"abc", "a.txt")


def test_an_async_file_object_is_refused_for_uploads(server: FakeCoderServer) -> None:
    class AsyncFile:
        name = "notes.md"

        async def read(self) -> bytes:
            return b"# notes"

    class Broken:
        name = "notes.md"

        def read(self) -> bytes:
            raise OSError("disk on fire")

    with CoderChatClient(server.url, server.token) as client:
        with pytest.raises(CoderAgentError, match="coroutine function"):
            client.upload_chat_file(server.organization_id, AsyncFile())
        with pytest.raises(CoderAgentError, match="disk on fire"):
            client.upload_chat_file(server.organization_id, Broken())
    with pytest.raises(CoderAgentError, match="closed"):
        client.watch_chats()


# -- transcripts (docs/transcripts.md) ------------------------------------------------------------


def test_a_blocking_session_records_a_transcript_that_replays_to_the_same_outcome(
    server: FakeCoderServer,
) -> None:
    server.config.scripts.push(
        Script(
            [
                CallClientTool(name="get_weather", args={"city": "Paris"}),
                Say("Paris: {tool_result}."),
            ]
        )
    )
    server.config.scripts.push(Script([Think("Hmm."), Say("Streamed through a drop.", chunk=3)]))
    lines: list[str] = []
    with agent_for(server, tools=[get_weather], recorder=TranscriptRecorder(lines.append)) as agent:
        first = agent.generate("weather in Paris")
        server.faults.drop_stream_after_frames(3)
        with agent.stream("think then talk") as stream:
            streamed = "".join(stream.text_stream)
        agent.reset_session()
    text = "".join(lines)
    assert server.token not in text
    transcript = parse_transcript(text)
    assert transcript.of(WsFrame)
    result = replay(transcript)
    assert [turn.matches_recording for turn in result.turns] == [True, True]
    assert first.text == 'Paris: {"city":"Paris","temp_c":21}.'
    assert streamed == "Streamed through a drop."


def test_a_tool_that_exits_its_thread_still_answers_every_call_d5(
    server: FakeCoderServer,
) -> None:
    server.config.scripts.add(
        "quit", Script((CallClientTool(name="quit_now", args={}), Say("{tool_result}")))
    )

    def quit_now() -> str:
        raise SystemExit(3)

    with agent_for(server, tools=[quit_now]) as agent:
        result = agent.generate("quit please")
    (outcome,) = result.steps[0].tool_results
    assert outcome.is_error
    assert server.counters.requests["submit_tool_results"] == 1


def test_request_timeout_bounds_a_request_that_hangs_c3(server: FakeCoderServer) -> None:
    """C.3: the segment's ``request_timeout`` ends the turn even while a blocking REST request
    is in flight (the request is cut at the deadline, as an event loop would abandon it)."""
    with agent_for(server, request_timeout=0.4) as agent:
        agent.generate("first turn")
        server.faults.delay_requests("create_chat_message", 3.0, times=1)
        started = time.monotonic()
        with pytest.raises(CoderAgentError) as info:
            agent.generate("this one hangs")
        elapsed = time.monotonic() - started
    assert getattr(info.value, "kind", None) == "timeout" and info.value.retryable
    assert elapsed < 2.5


def test_a_blocking_segment_leaves_the_pause_to_the_caller(server: FakeCoderServer) -> None:
    """docs/tools.md "Running the tools yourself", on the blocking adapter."""
    server.config.scripts.push(
        Script(
            [
                CallClientTool(name="get_weather", args={"city": "Oslo"}),
                Say("{tool_result.temp_c} C"),
            ]
        )
    )
    with agent_for(server, tools=[get_weather]) as agent:
        with agent.segment("Weather in Oslo?", timeout=30) as paused:
            first = paused.get_final_result()
        call = first.tool_calls[0]
        answer = ToolMessage(
            (ToolResultContent(tool_call_id=call.tool_call_id, output={"temp_c": 4}),)
        )
        with agent.segment(messages=[answer]) as resumed:
            second = resumed.get_final_result()
    assert first.finish_reason == "tool-calls"
    assert second.text == "4 C"
