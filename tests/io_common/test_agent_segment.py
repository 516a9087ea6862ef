"""``CoderAgent.segment``: one model round trip, on asyncio, trio and the blocking adapter. The
pause's client calls come back unrun; a segment whose messages end in tool results resumes the paused chat on the
stream it kept (H.6)."""

from __future__ import annotations

from typing import Any

import pytest

from coder_integrations.pytest_plugin import FakeCoder
from coder_proto import TextContent, TextDelta, ToolMessage, ToolResultContent, UserMessage
from coder_proto.fake import CallClientTool, Say

ASYNC_RUNTIMES = pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])


def lookup(city: str) -> dict[str, Any]:
    """Get the weather for a city."""
    raise AssertionError("a segment never runs a tool")


@ASYNC_RUNTIMES
@pytest.mark.anyio
@pytest.mark.coder_agent(tools=[lookup])
@pytest.mark.coder_script(
    CallClientTool(name="lookup", args={"city": "Oslo"}),
    Say("Oslo has {tool_result.temp_c} degrees."),
)
async def test_a_segment_stops_at_the_pause_and_the_next_resumes_it(
    coder_agent: Any, coder_fake: FakeCoder
) -> None:
    async with coder_agent.segment("Weather in Oslo?") as segment:
        paused = await segment.get_final_result()
    assert paused.finish_reason == "tool-calls"
    [call] = paused.tool_calls
    assert (call.tool_name, call.input) == ("lookup", '{"city":"Oslo"}')
    assert coder_fake.tool_results() == []

    result = ToolResultContent(tool_call_id=call.tool_call_id, output={"temp_c": 12})
    async with coder_agent.segment(messages=[ToolMessage((result,))]) as segment:
        deltas = [part.delta async for part in segment if isinstance(part, TextDelta)]
        done = await segment.get_final_result()
    assert "".join(deltas) == done.text == "Oslo has 12 degrees."
    assert done.finish_reason == "stop" and done.chat_id == paused.chat_id
    [submitted] = coder_fake.tool_results()
    assert submitted["output"] == {"temp_c": 12}
    assert coder_fake.prompts() == ["Weather in Oslo?"]


@ASYNC_RUNTIMES
@pytest.mark.anyio
@pytest.mark.coder_script(Say("Plain."))
async def test_a_segment_without_tools_is_a_whole_turn(coder_agent: Any) -> None:
    message = UserMessage((TextContent("Hi"),))
    async with coder_agent.segment(messages=[message]) as segment:
        result = await segment.get_final_result()
    assert (result.text, result.finish_reason) == ("Plain.", "stop")


@pytest.mark.coder_agent(tools=[lookup])
@pytest.mark.coder_script(
    CallClientTool(name="lookup", args={"city": "Oslo"}), Say("Oslo has {tool_result.temp_c}.")
)
def test_a_blocking_segment_stops_at_the_pause_and_the_next_resumes_it(
    coder_sync_agent: Any, coder_fake: FakeCoder
) -> None:
    with coder_sync_agent.segment("Weather in Oslo?", timeout=30) as segment:
        paused = segment.get_final_result()
    [call] = paused.tool_calls
    result = ToolResultContent(tool_call_id=call.tool_call_id, output={"temp_c": 3})
    with coder_sync_agent.segment(messages=[ToolMessage((result,))]) as segment:
        text = "".join(segment.text_stream)
    assert text == "Oslo has 3."
    assert [r["output"] for r in coder_fake.tool_results()] == [{"temp_c": 3}]
