"""pydantic-ai's own agent loop (``Agent.run``, ``run_sync``, ``run_stream``) on a Coder chat
through ``CoderModel``, against the fake Coder server over loopback
(docs/integrations/pydantic-ai.md): text, streaming, function tools through the pause and the
resume, structured output, the server's tools, usage and the chat id in the result, and the
cancellation that interrupts the run."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from collections.abc import Iterator
from datetime import date
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic_ai import Agent, BinaryContent, ImageUrl, ModelRetry
from pydantic_ai.messages import (
    ModelRequest,
    ModelResponse,
    NativeToolCallPart,
    NativeToolReturnPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
)
from pydantic_ai.models import ModelRequestParameters

from coder_integrations.fake_server import FakeCoderServer
from coder_io_asyncio import CoderAgentError, CoderChatError
from coder_io_asyncio.integrations.pydantic_ai import CoderModel
from coder_proto.fake import (
    CallClientTool,
    CallServerTool,
    Fail,
    ReportUsage,
    Say,
    Script,
    Think,
    Wait,
)


class Triage(BaseModel):
    severity: str
    summary: str


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.0005, interrupt_delay=0.02) as fake:
        yield fake


def model_for(server: FakeCoderServer, **kwargs: Any) -> CoderModel:
    return CoderModel(
        base_url=server.url,
        token=server.token,
        organization_id=server.organization_id,
        settle_retry_delay=0.05,
        **kwargs,
    )


def weather_agent(model: CoderModel, calls: list[str]) -> Agent[None, str]:
    agent = Agent(model)

    @agent.tool_plain
    def get_weather(city: str) -> dict[str, Any]:
        """Get the weather for a city."""
        calls.append(city)
        return {"city": city, "temp_c": 21, "at": date(2026, 12, 7)}

    return agent


def weather_script(city: str) -> Script:
    return Script(
        [
            CallClientTool(name="get_weather", args={"city": city}),
            Say("{tool_result.city}: {tool_result.temp_c} degrees."),
        ]
    )


def test_a_run_answers_with_the_chats_text_usage_and_chat_id(server: FakeCoderServer) -> None:
    server.config.scripts.push(
        Script(
            [
                Think("A greeting."),
                Say("Hello from Coder."),
                ReportUsage(input_tokens=30, output_tokens=7),
            ]
        )
    )

    async def scenario() -> Any:
        async with model_for(server, model="claude-sonnet-4-6") as model:
            result = await Agent(
                model, system_prompt="You are terse.", instructions="Be brief."
            ).run("hello")
            return result, model.chat_id

    result, chat_id = asyncio.run(scenario())
    assert result.output == "Hello from Coder."
    response = result.all_messages()[-1]
    assert isinstance(response, ModelResponse)
    assert response.provider_name == "coder"
    assert response.model_name == "claude-sonnet-4-6"
    assert response.finish_reason == "stop"
    assert [type(p) for p in response.parts] == [ThinkingPart, TextPart]
    assert response.parts[0].content == "A greeting."
    assert response.provider_details is not None
    assert response.provider_details["chat_id"] == chat_id is not None
    assert result.usage.requests == 1
    assert result.usage.input_tokens >= 30
    assert result.usage.output_tokens == 7
    assert server.model.chats[chat_id].system_prompt == "You are terse.\n\nBe brief."


def test_run_sync_runs_a_function_tool_through_the_pause_and_the_resume(
    server: FakeCoderServer,
) -> None:
    server.config.scripts.push(weather_script("Paris"))
    calls: list[str] = []
    model = model_for(server)
    agent = weather_agent(model, calls)
    result = agent.run_sync("What is the weather in Paris?")
    loop = asyncio.get_event_loop()  # the loop run_sync ran on, which the chat's sockets use
    try:
        loop.run_until_complete(model.aclose())
    finally:
        asyncio.set_event_loop(None)
        loop.close()
    assert calls == ["Paris"]
    assert result.output == "Paris: 21 degrees."
    messages = result.all_messages()
    paused = messages[1]
    assert isinstance(paused, ModelResponse)
    assert paused.finish_reason == "tool_call"
    assert [type(p) for p in paused.parts] == [ToolCallPart]
    assert result.usage.requests == 2
    assert result.usage.tool_calls == 1
    chat_ids = {m.provider_details["chat_id"] for m in messages if isinstance(m, ModelResponse)}
    assert len(chat_ids) == 1
    assert server.counters.requests["submit_tool_results"] == 1


def test_run_stream_streams_the_text_of_the_chat(server: FakeCoderServer) -> None:
    server.config.scripts.push(weather_script("Rome"))

    async def scenario() -> tuple[list[str], str]:
        calls: list[str] = []
        async with model_for(server) as model:
            agent = weather_agent(model, calls)
            async with agent.run_stream("Weather in Rome?") as stream:
                deltas = [d async for d in stream.stream_text(delta=True)]
                output = await stream.get_output()
        return deltas, output

    deltas, output = asyncio.run(scenario())
    assert "".join(deltas) == output == "Rome: 21 degrees."


def test_structured_output_comes_from_the_output_tool_and_the_next_prompt_answers_the_pause(
    server: FakeCoderServer,
) -> None:
    filing = Script(
        [
            CallClientTool(name="final_result", args={"severity": "major", "summary": "db down"}),
            Say("Filed."),
        ]
    )
    server.config.scripts.push(filing)
    server.config.scripts.push(Script([Say("Acknowledged.")]))
    server.config.scripts.push(
        Script(
            [
                CallClientTool(name="final_result", args={"severity": "minor", "summary": "ok"}),
                Say("Filed."),
            ]
        )
    )

    async def scenario() -> tuple[Any, Any]:
        async with model_for(server) as model:
            agent = Agent(model, output_type=Triage)
            first = await agent.run("Triage the outage.")
            second = await agent.run("Triage it again.", message_history=first.all_messages())
            return first, second

    first, second = asyncio.run(scenario())
    assert first.output == Triage(severity="major", summary="db down")
    assert second.output == Triage(severity="minor", summary="ok")
    # The pause pydantic-ai ended on was answered before the second prompt went out.
    assert server.counters.requests["submit_tool_results"] == 1


def test_a_wind_down_that_calls_tools_again_is_interrupted_before_the_next_prompt(
    server: FakeCoderServer,
) -> None:
    server.config.scripts.push(
        Script(
            [
                CallClientTool(name="final_result", args={"severity": "major", "summary": "a"}),
                Say("One more filing."),
                CallClientTool(name="final_result", args={"severity": "minor", "summary": "b"}),
            ]
        )
    )
    server.config.scripts.push(
        Script([CallClientTool(name="final_result", args={"severity": "minor", "summary": "c"})])
    )

    async def scenario() -> list[Any]:
        async with model_for(server) as model:
            agent = Agent(model, output_type=Triage)
            first = await agent.run("Triage the outage.")
            second = await agent.run("Again.", message_history=first.all_messages())
            return [first.output.summary, second.output.summary]

    assert asyncio.run(scenario()) == ["a", "c"]
    assert server.counters.requests["interrupt_chat"] >= 1


def test_a_tool_that_asks_for_a_retry_answers_the_call_with_an_error(
    server: FakeCoderServer,
) -> None:
    server.config.scripts.push(
        Script([CallClientTool(name="lookup", args={"key": "x"}), Say("Saw: {tool_result}")])
    )

    async def scenario() -> Any:
        async with model_for(server) as model:
            agent = Agent(model, retries=2)

            @agent.tool_plain
            def lookup(key: str) -> str:
                """Look a key up."""
                raise ModelRetry("no such key")

            return await agent.run("lookup x")

    result = asyncio.run(scenario())
    assert "no such key" in result.output


def test_invalid_arguments_and_an_output_validators_retry_reach_the_model(
    server: FakeCoderServer,
) -> None:
    server.config.scripts.push(
        Script([CallClientTool(name="lookup", args={"key": 5}), Say("Saw: {tool_result}")])
    )
    server.config.scripts.push(Script([Say("Second try.")]))

    async def scenario() -> Any:
        async with model_for(server) as model:
            agent = Agent(model, retries=2)

            @agent.tool_plain
            def lookup(key: str) -> str:
                """Look a key up."""
                return "found"

            @agent.output_validator
            def no_echo(output: str) -> str:
                if output.startswith("Saw"):
                    raise ModelRetry("answer in your own words")
                return output

            return await agent.run("lookup x")

    result = asyncio.run(scenario())
    assert result.output == "Second try."
    first_answer = result.all_messages()[3]
    assert "valid string" in first_answer.parts[0].content
    assert server.model.chats[first_answer.provider_details["chat_id"]] is not None


def test_the_servers_own_tools_arrive_as_native_tool_parts(server: FakeCoderServer) -> None:
    server.config.scripts.push(
        Script(
            [
                CallServerTool(name="web_search", args={"q": "coder"}, result={"hits": 3}),
                Say("Found 3."),
            ]
        )
    )

    async def scenario() -> Any:
        async with model_for(server) as model:
            return await Agent(model).run("search the web")

    result = asyncio.run(scenario())
    response = result.all_messages()[-1]
    kinds = [type(p) for p in response.parts]
    assert kinds == [NativeToolCallPart, NativeToolReturnPart, TextPart]
    assert response.parts[1].content == {"hits": 3}
    assert result.output == "Found 3."


def test_a_failed_run_raises_the_chat_error(server: FakeCoderServer) -> None:
    server.config.scripts.push(Script([Fail(message="the provider is down")]))

    async def scenario() -> None:
        async with model_for(server) as model:
            await Agent(model).run("hello")

    with pytest.raises(CoderChatError, match="the provider is down"):
        asyncio.run(scenario())


def test_cancelling_a_run_interrupts_the_chat(server: FakeCoderServer) -> None:
    server.config.scripts.push(Script([Say("thinking"), Wait(30.0)]))

    async def scenario() -> None:
        model = model_for(server)
        try:
            async with Agent(model).run_stream("think hard") as stream:
                async for _delta in stream.stream_text(delta=True):
                    raise asyncio.CancelledError
        finally:
            await model.aclose(archive=False)  # closing interrupts nothing itself

    with pytest.raises(asyncio.CancelledError):
        asyncio.run(scenario())
    assert server.counters.requests["interrupt_chat"] >= 1
    assert server.counters.requests["update_chat"] == 0  # not archived


def test_a_new_conversation_starts_a_fresh_chat(server: FakeCoderServer) -> None:
    async def scenario() -> tuple[str | None, str | None, list[Any]]:
        async with model_for(server) as model:
            agent = Agent(model)
            first = await agent.run("hello")
            one = model.chat_id
            second = await agent.run("hello")
            return one, model.chat_id, [first.output, second.output]

    one, two, outputs = asyncio.run(scenario())
    assert one is not None and two is not None and one != two
    assert outputs[0] == outputs[1]


def test_a_chat_left_unarchived_is_continued_by_a_new_model(server: FakeCoderServer) -> None:
    server.config.scripts.push(Script([Say("first")]))
    server.config.scripts.push(Script([Say("second")]))

    async def scenario() -> tuple[str | None, str | None, list[str]]:
        model = model_for(server)
        first = await Agent(model).run("hello")
        chat_id = model.chat_id
        await model.aclose(archive=False)
        async with model_for(server, chat_id=chat_id) as again:
            second = await Agent(again).run("more", message_history=first.all_messages())
            return chat_id, again.chat_id, [first.output, second.output]

    chat_id, continued, outputs = asyncio.run(scenario())
    assert continued == chat_id is not None
    assert outputs == ["first", "second"]


def test_a_conversation_cannot_change_its_tools(server: FakeCoderServer) -> None:
    async def scenario() -> None:
        async with model_for(server) as model:
            first = await Agent(model).run("hello")
            calls: list[str] = []
            await weather_agent(model, calls).run("again", message_history=first.all_messages())

    with pytest.raises(CoderAgentError, match="fixed when it is created"):
        asyncio.run(scenario())


def test_a_new_conversation_may_bring_other_tools(server: FakeCoderServer) -> None:
    server.config.scripts.push(Script([Say("plain")]))
    server.config.scripts.push(weather_script("Oslo"))

    async def scenario() -> list[str]:
        calls: list[str] = []
        async with model_for(server) as model:
            plain = await Agent(model).run("hello")
            tooled = await weather_agent(model, calls).run("Weather in Oslo?")
        return [plain.output, tooled.output, *calls]

    assert asyncio.run(scenario()) == ["plain", "Oslo: 21 degrees.", "Oslo"]


def test_prompts_carry_text_and_file_bytes_and_refuse_other_content(
    server: FakeCoderServer,
) -> None:
    server.config.scripts.push(Script([Say("{attachments.0.media_type}: {attachment}")]))

    async def scenario() -> str:
        async with model_for(server) as model:
            agent = Agent(model)
            result = await agent.run(
                ["Read this.", BinaryContent(data=b"a note", media_type="text/plain")]
            )
            with pytest.raises(CoderAgentError, match="not ImageUrl"):
                await agent.run(["Look.", ImageUrl(url="https://example.com/a.png")])
            return result.output

    assert asyncio.run(scenario()) == "text/plain: a note"


def test_a_request_needs_something_to_send(server: FakeCoderServer) -> None:
    async def scenario() -> None:
        async with model_for(server) as model:
            params = ModelRequestParameters()
            with pytest.raises(CoderAgentError, match="must end with"):
                await model.request([], None, params)
            with pytest.raises(CoderAgentError, match="nothing to send"):
                await model.request([ModelRequest(parts=[])], None, params)

    asyncio.run(scenario())


def test_tools_and_output_type_come_from_the_pydantic_ai_agent() -> None:
    with pytest.raises(CoderAgentError, match="come from the pydantic-ai agent"):
        CoderModel(tools=[])
    assert CoderModel(model="gpt-5").model_name == "gpt-5"
    assert CoderModel(model_name="mine").system == "coder"
    assert CoderModel().chat_id is None


def test_importing_the_adapter_does_not_import_pydantic_ai() -> None:
    code = (
        "import sys, coder_io_asyncio, coder_io_asyncio.integrations; "
        "assert 'pydantic_ai' not in sys.modules, 'pydantic_ai imported'"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


def test_run_stream_takes_structured_output_from_the_output_tool(server: FakeCoderServer) -> None:
    server.config.scripts.push(
        Script(
            [
                CallClientTool(name="final_result", args={"severity": "major", "summary": "x"}),
                Say("Filed."),
            ]
        )
    )

    async def scenario() -> tuple[list[Any], Any]:
        async with model_for(server) as model:
            async with Agent(model, output_type=Triage).run_stream("Triage it.") as stream:
                partial = [output async for output in stream.stream_output()]
                return partial, await stream.get_output()

    partial, output = asyncio.run(scenario())
    assert output == Triage(severity="major", summary="x")
    assert partial[-1] == output
