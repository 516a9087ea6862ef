"""The OpenAI Agents SDK's own ``Runner`` drives a Coder chat on the fake server through
``CoderModel`` and ``CoderModelProvider``: text, streaming, function tools through the pause
and resume, structured output through the filing tool, usage and the chat id in the run's
result, cancellation, and the inputs that do not map."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest
from agents import (
    Agent,
    ItemHelpers,
    ModelBehaviorError,
    ModelSettings,
    ModelTracing,
    ReasoningItem,
    RunConfig,
    Runner,
    ToolCallItem,
    ToolCallOutputItem,
    WebSearchTool,
    function_tool,
)
from openai.types.responses import ResponseOutputMessage, ResponseTextDeltaEvent
from pydantic import BaseModel

from coder_integrations.pytest_plugin import FakeCoder
from coder_io_asyncio.integrations.openai_agents import CoderModel, CoderModelProvider
from coder_proto import AgentOptions, CoderAgentError, CoderApiError
from coder_proto.fake import CallClientTool, ReportUsage, Say, Think, Wait


@function_tool
def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return f"{city}: 19 C"


def model_for(fake: FakeCoder, **kwargs: Any) -> CoderModel:
    return CoderModel(**fake.connection(), **kwargs)


@pytest.mark.anyio
@pytest.mark.coder_script(
    Think("A greeting."),
    Say("Hello there."),
    ReportUsage(input_tokens=40, output_tokens=5, cache_read_tokens=8, reasoning_tokens=2),
)
async def test_a_text_answer_with_its_usage_and_chat_id(coder_fake: FakeCoder) -> None:
    async with model_for(coder_fake) as model:
        agent = Agent(name="greeter", instructions="Be brief.", model=model)
        result = await Runner.run(agent, "Hi!")
        assert result.final_output == "Hello there."
        [reasoning] = [item for item in result.new_items if isinstance(item, ReasoningItem)]
        assert reasoning.raw_item.summary[0].text == "A greeting."
        usage = result.context_wrapper.usage
        assert (usage.requests, usage.input_tokens, usage.output_tokens) == (1, 48, 5)
        assert usage.input_tokens_details.cached_tokens == 8
        assert usage.output_tokens_details.reasoning_tokens == 2
        assert result.last_response_id == model.chat_id is not None
        assert coder_fake.chat(model.chat_id).system_prompt == "Be brief."
        assert coder_fake.prompts(model.chat_id) == ["Hi!"]
    assert coder_fake.archived_chat_ids() == [result.last_response_id]


@pytest.mark.anyio
@pytest.mark.coder_script(
    CallClientTool(name="get_weather", args={"city": "Oslo"}),
    Say("It is {tool_result} there."),
    match="weather",
)
async def test_a_function_tool_runs_in_the_sdk_between_two_round_trips(
    coder_fake: FakeCoder,
) -> None:
    async with model_for(coder_fake) as model:
        agent = Agent(name="weather", model=model, tools=[get_weather])
        result = await Runner.run(agent, "What is the weather in Oslo?")
        assert result.final_output == 'It is "Oslo: 19 C" there.'
        [call] = [item for item in result.new_items if isinstance(item, ToolCallItem)]
        [output] = [item for item in result.new_items if isinstance(item, ToolCallOutputItem)]
        assert call.raw_item.name == "get_weather"
        assert output.output == "Oslo: 19 C"
        assert result.context_wrapper.usage.requests == 2
        [submitted] = coder_fake.tool_results(model.chat_id)
        assert submitted["output"] == "Oslo: 19 C" and not submitted.get("is_error")
        [tool] = coder_fake.chat(model.chat_id).dynamic_tools
        assert tool["name"] == "get_weather"
        assert tool["description"] == "Get the weather for a city."


@pytest.mark.anyio
@pytest.mark.coder_script(
    CallClientTool(name="get_weather", args={"city": "Rome"}),
    Say("Sunny, {tool_result}."),
    match="Rome",
)
async def test_streaming_yields_text_deltas_across_the_tool_loop(coder_fake: FakeCoder) -> None:
    async with model_for(coder_fake) as model:
        agent = Agent(name="weather", model=model, tools=[get_weather])
        result = Runner.run_streamed(agent, "Weather in Rome?")
        deltas: list[str] = []
        kinds: list[str] = []
        async for event in result.stream_events():
            if event.type == "raw_response_event" and isinstance(
                event.data, ResponseTextDeltaEvent
            ):
                deltas.append(event.data.delta)
            elif event.type == "run_item_stream_event":
                kinds.append(event.name)
        assert "".join(deltas) == 'Sunny, "Rome: 19 C".'
        assert result.final_output == 'Sunny, "Rome: 19 C".'
        assert kinds == ["tool_called", "tool_output", "message_output_created"]
        assert result.context_wrapper.usage.requests == 2
        assert result.last_response_id == model.chat_id


@pytest.mark.coder_script(Say("{prompt} to you too."))
def test_run_sync_with_the_provider_keeps_one_chat_per_model_name(coder_fake: FakeCoder) -> None:
    provider = CoderModelProvider(**coder_fake.connection())
    agent = Agent(name="echo")
    config = RunConfig(model_provider=provider)
    first = Runner.run_sync(agent, "Hello", run_config=config)
    assert first.final_output == "Hello to you too."
    second = Runner.run_sync(
        agent, [*first.to_input_list(), {"role": "user", "content": "Good day"}], run_config=config
    )
    assert second.final_output == "Good day to you too."
    model = provider.get_model(None)
    assert second.last_response_id == first.last_response_id == model.chat_id
    assert coder_fake.prompts(model.chat_id) == ["Hello", "Good day"]
    assert repr(model) == f"<CoderModel model=None chat_id={model.chat_id!r}>"

    import asyncio

    asyncio.run(provider.aclose())
    assert coder_fake.archived_chat_ids() == [model.chat_id]


@pytest.mark.anyio
@pytest.mark.coder_script(Say("slow"), Wait(30), Say("never"))
async def test_cancelling_a_streamed_run_interrupts_the_chat(coder_fake: FakeCoder) -> None:
    async with model_for(coder_fake) as model:
        result = Runner.run_streamed(Agent(name="slow", model=model), "Go on")
        async for event in result.stream_events():
            if event.type == "raw_response_event" and isinstance(
                event.data, ResponseTextDeltaEvent
            ):
                result.cancel()
        assert await coder_fake.until(lambda: coder_fake.interrupts(model.chat_id)) == 1


@pytest.mark.anyio
@pytest.mark.coder_script(Say("On it."))
async def test_an_existing_chat_is_continued_and_can_be_left_unarchived(
    coder_fake: FakeCoder,
) -> None:
    async with model_for(coder_fake) as first:
        await Runner.run(Agent(name="a", model=first), "One")
        chat_id, cursor = first.chat_id, first.last_seen_message_id
        await first.aclose(archive=False)
    assert coder_fake.archived_chat_ids() == [] and cursor is not None
    model = model_for(coder_fake, chat_id=chat_id, last_seen_message_id=cursor)
    assert (model.chat_id, model.last_seen_message_id) == (chat_id, cursor)
    result = await Runner.run(Agent(name="a", model=model), "Two")
    assert result.final_output == "On it." and model.chat_id == chat_id
    assert coder_fake.prompts(chat_id) == ["One", "Two"]
    await model.close()
    assert coder_fake.archived_chat_ids() == [chat_id]


@pytest.mark.anyio
async def test_handoffs_are_registered_as_client_tools(coder_fake: FakeCoder) -> None:
    async with model_for(coder_fake) as model:
        helper = Agent(name="helper", model=model)
        await Runner.run(Agent(name="front", model=model, handoffs=[helper]), "Hi")
        [tool] = coder_fake.chat(model.chat_id).dynamic_tools
        assert tool["name"] == "transfer_to_helper"


@pytest.mark.anyio
async def test_what_does_not_map_is_refused_before_anything_is_sent(
    coder_fake: FakeCoder,
) -> None:
    with pytest.raises(CoderAgentError, match="tools= comes from"):
        model_for(coder_fake, tools=[])
    async with model_for(coder_fake) as model:
        with pytest.raises(CoderAgentError, match="not a WebSearchTool"):
            await Runner.run(Agent(name="search", model=model, tools=[WebSearchTool()]), "Hi")
        image = {"role": "user", "content": [{"type": "input_image", "image_url": "x"}]}
        with pytest.raises(CoderAgentError, match="'input_image' cannot be sent"):
            await Runner.run(Agent(name="look", model=model), [image])
        assistant = ResponseOutputMessage(
            id="m1", content=[], role="assistant", status="completed", type="message"
        )
        with pytest.raises(CoderAgentError):
            await model.get_response(
                None, [assistant], ModelSettings(), [], None, [], ModelTracing.DISABLED
            )
        assert model.chat_id is None
    assert coder_fake.chats == []


@pytest.mark.anyio
@pytest.mark.coder_script(Say("Parts arrive."))
async def test_a_user_message_of_text_parts(coder_fake: FakeCoder) -> None:
    async with model_for(coder_fake) as model:
        message = {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "Two"},
                {"type": "input_text", "text": "parts"},
            ],
        }
        result = await Runner.run(Agent(name="parts", model=model), [message])
        assert ItemHelpers.text_message_outputs(result.new_items) == "Parts arrive."
        assert coder_fake.prompts(model.chat_id) == ["Twoparts"]


@pytest.mark.anyio
@pytest.mark.coder_script(Say("Called directly."))
async def test_the_model_called_directly_with_a_string(coder_fake: FakeCoder) -> None:
    async with model_for(coder_fake):
        pass  # never used: nothing to close
    async with model_for(coder_fake, model="claude-sonnet-4-6") as model:
        response = await model.get_response(
            "Be brief.", "Hi", ModelSettings(), [], None, [], ModelTracing.DISABLED
        )
        [message] = response.output
        assert isinstance(message, ResponseOutputMessage)
        assert message.content[0].text == "Called directly."
        assert response.response_id == model.chat_id
        assert coder_fake.chat(model.chat_id).system_prompt == "Be brief."
    assert coder_fake.archived_chat_ids() == [model.chat_id]


def test_importing_the_adapter_does_not_import_the_sdk() -> None:
    code = "import sys, coder_io_asyncio; sys.exit('agents' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], check=False).returncode == 0


class Weather(BaseModel):
    city: str
    temp_c: int


OSLO = {"city": "Oslo", "temp_c": 12}


@pytest.mark.anyio
@pytest.mark.coder_script(CallClientTool(name="structured_output", args=OSLO), Say("Filed."))
async def test_an_output_type_is_filed_through_a_tool_and_acknowledged(
    coder_fake: FakeCoder,
) -> None:
    async with model_for(coder_fake) as model:
        agent = Agent(name="typed", model=model, output_type=Weather)
        result = await Runner.run(agent, "Weather in Oslo?")
        assert result.final_output == Weather(city="Oslo", temp_c=12)
        assert result.context_wrapper.usage.requests == 2
        [ack] = coder_fake.tool_results(model.chat_id)
        assert not ack.get("is_error") and "Answer recorded" in ack["output"]
        [tool] = coder_fake.chat(model.chat_id).dynamic_tools
        assert tool["name"] == "structured_output"
        assert "structured_output" in coder_fake.chat(model.chat_id).system_prompt


@pytest.mark.anyio
@pytest.mark.coder_script(
    CallClientTool(name="structured_output", args={"city": "Oslo"}),
    Say("Let me fix that."),
    CallClientTool(name="structured_output", args=OSLO),
    Say("Done."),
)
async def test_an_invalid_filing_is_answered_with_its_error_and_filed_again(
    coder_fake: FakeCoder,
) -> None:
    async with model_for(coder_fake) as model:
        result = Runner.run_streamed(Agent(name="typed", model=model, output_type=Weather), "Go")
        deltas = [
            event.data.delta
            async for event in result.stream_events()
            if event.type == "raw_response_event" and isinstance(event.data, ResponseTextDeltaEvent)
        ]
        assert result.final_output == Weather(city="Oslo", temp_c=12)
        assert deltas == ['{"city":"Oslo","temp_c":12}']
        error, ack = coder_fake.tool_results(model.chat_id)
        assert error["is_error"] and "does not match the schema" in error["output"]
        assert not ack.get("is_error")


@pytest.mark.anyio
@pytest.mark.coder_script(
    CallClientTool(name="get_weather", args={"city": "Oslo"}),
    CallClientTool(name="structured_output", args=OSLO),
    Say("Done."),
)
async def test_a_filing_beside_a_function_call_is_answered_with_its_result(
    coder_fake: FakeCoder,
) -> None:
    async with model_for(coder_fake) as model:
        agent = Agent(name="typed", model=model, output_type=Weather, tools=[get_weather])
        result = await Runner.run(agent, "Weather in Oslo?")
        assert result.final_output == Weather(city="Oslo", temp_c=12)
        [call] = [item for item in result.new_items if isinstance(item, ToolCallItem)]
        assert call.raw_item.name == "get_weather"
        outputs = {r["output"] for r in coder_fake.tool_results(model.chat_id)}
        assert "Oslo: 19 C" in outputs and len(outputs) == 2


@pytest.mark.anyio
@pytest.mark.coder_script(Say("Just prose."))
async def test_an_answer_in_prose_is_the_sdks_model_behaviour_error(
    coder_fake: FakeCoder,
) -> None:
    async with model_for(coder_fake) as model:
        with pytest.raises(ModelBehaviorError):
            await Runner.run(Agent(name="typed", model=model, output_type=Weather), "Go")


BAD = CallClientTool(name="structured_output", args={"city": "Oslo"})


@pytest.mark.anyio
@pytest.mark.coder_script(BAD, Say("Again."), BAD, Say("Again."), BAD, Say("Again."), BAD)
async def test_filings_rejected_round_after_round_interrupt_the_run(coder_fake: FakeCoder) -> None:
    async with model_for(coder_fake) as model:
        with pytest.raises(CoderAgentError, match="4 answers in a row"):
            await Runner.run(Agent(name="typed", model=model, output_type=Weather), "Go")
        # Interrupting a paused chat may take a second interrupt (D4).
        assert await coder_fake.until(lambda: coder_fake.interrupts(model.chat_id) >= 1)
        *rejected, cancelled = coder_fake.tool_results(model.chat_id)
        assert [r["is_error"] for r in rejected] == [True, True, True]
        assert all("does not match the schema" in r["output"] for r in rejected)
        assert cancelled["is_error"] and "interrupted" in cancelled["output"]


@pytest.mark.anyio
async def test_a_model_without_a_name_keeps_the_options_model(coder_fake: FakeCoder) -> None:
    # A config id is sent as it is; the fake refuses one it does not know.
    options = AgentOptions(model="00000000-0000-4000-8000-000000000000")
    async with CoderModel(options=options, **coder_fake.connection()) as model:
        with pytest.raises(CoderApiError, match="model config not found"):
            await Runner.run(Agent(name="a", model=model), "Hi")
