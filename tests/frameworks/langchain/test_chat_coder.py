"""``ChatCoder`` driven by LangChain and LangGraph against the fake Coder server: text,
streaming, client tools through the pause and resume, structured output, usage and the chat
id, one chat per conversation, cancellation and the errors of inputs that cannot reach a
chat."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from langchain_core.messages import (
    AIMessage,
    AIMessageChunk,
    HumanMessage,
    SystemMessage,
    ToolMessage,
)
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.graph import START, MessagesState, StateGraph
from langgraph.prebuilt import ToolNode, tools_condition
from pydantic import BaseModel

from coder_integrations.fake_server import FakeCoderServer
from coder_integrations.pytest_plugin import FakeCoder
from coder_io_asyncio import CoderAgentError
from coder_io_asyncio.integrations.langchain import ChatCoder
from coder_proto.fake import CallClientTool, ReportUsage, Say, Script, Wait

pytestmark = pytest.mark.anyio


@tool
def get_weather(city: str) -> dict[str, Any]:
    """Get the weather for a city."""
    return {"city": city, "temp_c": 21}


class Weather(BaseModel):
    """The weather report."""

    city: str
    temp_c: int


@pytest.fixture
def fake(coder_server: FakeCoderServer) -> FakeCoder:
    fake = FakeCoder(coder_server)
    scripts = coder_server.config.scripts
    scripts.add(r"count", Script([ReportUsage(input_tokens=7, output_tokens=3), Say("counted")]))
    scripts.add(r"slow", Script([Say("starting"), Wait(30), Say("never")]))
    scripts.add(
        r"weather in (?P<city>\w+)",
        Script(
            [
                CallClientTool(name="get_weather", args={"city": "{city}"}),
                Say("{city}: {tool_result.temp_c} degrees."),
            ]
        ),
    )
    return fake


def _chat_id(message: AIMessage) -> str:
    chat_id = message.response_metadata["coder_chat_id"]
    assert isinstance(chat_id, str)
    return chat_id


def test_a_conversation_keeps_its_chat_and_sends_only_the_new_message(
    model: ChatCoder, fake: FakeCoder
) -> None:
    first = model.invoke([SystemMessage("Answer tersely."), HumanMessage("Echo one")])
    assert first.content == "You said: Echo one"
    history = [SystemMessage("Answer tersely."), HumanMessage("Echo one"), first]
    second = model.invoke([*history, HumanMessage("Echo two")])
    assert second.content == "You said: Echo two"
    chat_id = _chat_id(first)
    assert _chat_id(second) == chat_id
    assert fake.prompts(chat_id) == ["Echo one", "Echo two"]
    assert fake.chat(chat_id).system_prompt == "Answer tersely."
    assert first.usage_metadata is not None and first.usage_metadata["input_tokens"] > 0
    assert first.usage_metadata["total_tokens"] == (
        first.usage_metadata["input_tokens"] + first.usage_metadata["output_tokens"]
    )
    assert first.response_metadata["finish_reason"] == "stop"


def test_another_model_continues_a_chat_named_in_the_history(
    model: ChatCoder, coder_server: FakeCoderServer, fake: FakeCoder
) -> None:
    first = model.invoke("Echo here")
    other = ChatCoder(
        base_url=coder_server.url,
        api_key=coder_server.token,
        organization_id=coder_server.organization_id,
    )
    try:
        again = other.invoke([HumanMessage("Echo here"), first, HumanMessage("Echo there")])
    finally:
        other.close()
    assert _chat_id(again) == _chat_id(first)
    assert fake.prompts(_chat_id(first)) == ["Echo here", "Echo there"]


def test_a_history_without_a_chat_goes_to_a_new_chat_as_a_transcript(
    model: ChatCoder, fake: FakeCoder
) -> None:
    history = [
        HumanMessage("What is 2 + 2?"),
        AIMessage("", tool_calls=[{"name": "add", "args": {"a": 2, "b": 2}, "id": "c1"}]),
    ]
    answer = model.invoke([*history, ToolMessage("4", tool_call_id="c1", status="error")])
    (prompt,) = fake.prompts(_chat_id(answer))
    assert prompt.startswith("The conversation so far:\nuser: What is 2 + 2?\n")
    assert 'assistant:  [called add({"a": 2, "b": 2}) as c1]' in prompt
    assert "tool result for c1 (error): 4" in prompt


def test_tool_output_that_is_not_json_stays_text(model: ChatCoder, fake: FakeCoder) -> None:
    with_tools = model.bind_tools([get_weather])
    call = with_tools.invoke("What is the weather in Lima?")
    results = [
        ToolMessage("[not json", tool_call_id=call.tool_calls[0]["id"], status="error"),
    ]
    with_tools.invoke(["What is the weather in Lima?", call, *results])
    fake.assert_tool_result("get_weather", "[not json", is_error=True)


def test_stream_delivers_the_text_then_the_usage_and_the_chat(model: ChatCoder) -> None:
    chunks = list(model.stream("Echo streaming words"))
    assert all(isinstance(c, AIMessageChunk) for c in chunks)
    assert "".join(str(c.content) for c in chunks) == "You said: Echo streaming words"
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole += chunk
    assert whole.usage_metadata is not None and whole.usage_metadata["output_tokens"] > 0
    assert whole.response_metadata["coder_chat_id"]


async def test_astream_and_ainvoke_share_the_conversation(
    model: ChatCoder, fake: FakeCoder
) -> None:
    first = await model.ainvoke("Echo async")
    chunks = [c async for c in model.astream([HumanMessage("Echo async"), first, "Echo more"])]
    assert "".join(str(c.content) for c in chunks) == "You said: Echo more"
    assert chunks[-1].response_metadata["coder_chat_id"] == _chat_id(first)
    assert fake.prompts(_chat_id(first)) == ["Echo async", "Echo more"]


def test_a_client_tool_pauses_the_chat_and_the_tool_message_resumes_it(
    model: ChatCoder, fake: FakeCoder
) -> None:
    with_tools = model.bind_tools([get_weather], tool_choice="auto")
    messages: list[Any] = [HumanMessage("What is the weather in Paris?")]
    call = with_tools.invoke(messages)
    assert call.response_metadata["finish_reason"] == "tool_calls"
    assert [(c["name"], c["args"]) for c in call.tool_calls] == [("get_weather", {"city": "Paris"})]
    chat_id = _chat_id(call)
    assert fake.chat(chat_id).status == "requires_action"
    messages += [call, get_weather.invoke(call.tool_calls[0])]
    answer = with_tools.invoke(messages)
    assert answer.content == "Paris: 21 degrees."
    assert _chat_id(answer) == chat_id
    fake.assert_tool_result("get_weather", {"city": "Paris", "temp_c": 21})


def test_a_streamed_tool_call_arrives_as_a_tool_call_chunk(model: ChatCoder) -> None:
    chunks = list(model.bind_tools([get_weather]).stream("What is the weather in Oslo?"))
    whole = chunks[0]
    for chunk in chunks[1:]:
        whole += chunk
    assert isinstance(whole, AIMessageChunk)
    assert [(c["name"], c["args"]) for c in whole.tool_calls] == [("get_weather", {"city": "Oslo"})]


def test_a_langgraph_tool_loop_runs_its_tools_on_a_coder_chat(
    model: ChatCoder, fake: FakeCoder
) -> None:
    with_tools = model.bind_tools([get_weather])

    def call_model(state: MessagesState) -> dict[str, Any]:
        return {"messages": [with_tools.invoke(state["messages"])]}

    graph = StateGraph(MessagesState)
    graph.add_node("model", call_model)
    graph.add_node("tools", ToolNode([get_weather]))
    graph.add_edge(START, "model")
    graph.add_conditional_edges("model", tools_condition)
    graph.add_edge("tools", "model")
    agent = graph.compile(checkpointer=InMemorySaver())
    config: Any = {"configurable": {"thread_id": "t-1"}}
    state = agent.invoke({"messages": [("user", "What is the weather in Rome?")]}, config)
    final = state["messages"][-1]
    assert final.content == "Rome: 21 degrees."
    fake.assert_tool_result("get_weather", {"city": "Rome", "temp_c": 21})
    state = agent.invoke({"messages": [("user", "Echo thanks")]}, config)
    assert state["messages"][-1].content == "You said: Echo thanks"
    # The thread kept its chat: both turns went to the same one.
    assert _chat_id(state["messages"][-1]) == _chat_id(final)
    assert fake.prompts(_chat_id(final)) == ["What is the weather in Rome?", "Echo thanks"]


def test_structured_output_is_filed_through_the_agent_tool(model: ChatCoder) -> None:
    report = model.with_structured_output(Weather).invoke("Report: city Paris, temp_c 21")
    assert isinstance(report, Weather)
    raw = model.with_structured_output(Weather.model_json_schema(), include_raw=True).invoke(
        "Report: city Paris, temp_c 21"
    )
    assert raw["parsing_error"] is None
    assert raw["parsed"] == report.model_dump()
    assert isinstance(raw["raw"], AIMessage)
    assert raw["raw"].response_metadata["coder_chat_id"]


async def test_cancelling_a_call_interrupts_the_run(model: ChatCoder, fake: FakeCoder) -> None:
    first = await model.ainvoke("Echo before")
    chat_id = _chat_id(first)
    with pytest.raises(TimeoutError):
        async with asyncio.timeout(0.5):
            await model.ainvoke([HumanMessage("Echo before"), first, HumanMessage("slow now")])
    await model.aclose()  # waits for the interrupt sent in the background
    fake.assert_interrupted(chat_id)


async def test_leaving_a_stream_early_interrupts_the_run(model: ChatCoder, fake: FakeCoder) -> None:
    first = await model.ainvoke("Echo start")
    stream = model.astream([HumanMessage("Echo start"), first, HumanMessage("slow again")])
    async for chunk in stream:
        assert chunk.content == "starting"
        break
    await stream.aclose()
    model.close()
    fake.assert_interrupted(_chat_id(first))


def test_leaving_a_sync_stream_early_interrupts_the_run(model: ChatCoder, fake: FakeCoder) -> None:
    first = model.invoke("Echo start")
    stream = model.stream([HumanMessage("Echo start"), first, HumanMessage("slow again")])
    for chunk in stream:
        assert chunk.content == "starting"
        break
    stream.close()
    model.close()
    fake.assert_interrupted(_chat_id(first))


def test_usage_without_cache_or_reasoning_counts_has_no_details(model: ChatCoder) -> None:
    answer = model.invoke([HumanMessage(content=["Please ", {"type": "text", "text": "count"}])])
    assert answer.content == "counted"
    assert answer.usage_metadata == {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}


def test_content_that_cannot_reach_a_chat_is_refused(model: ChatCoder) -> None:
    reasoning = {"type": "reasoning", "reasoning": "hmm"}
    with pytest.raises(CoderAgentError, match="'reasoning' content block cannot be sent"):
        model.invoke([HumanMessage(content=[{"type": "text", "text": "Look"}, reasoning])])
    with pytest.raises(CoderAgentError, match="no user message"):
        model.invoke([SystemMessage("Only instructions.")])


def test_settings_come_from_the_environment_and_the_token_stays_hidden(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CODER_URL", "https://coder.example.com")
    monkeypatch.setenv("CODER_SESSION_TOKEN", "s3cret-token")
    model = ChatCoder(model="claude-sonnet-4-6", timeout=30)
    assert model.base_url == "https://coder.example.com"
    assert model.request_timeout == 30
    assert "s3cret-token" not in repr(model)
    params = model._get_ls_params()
    assert (params["ls_provider"], params["ls_model_name"]) == ("coder", "claude-sonnet-4-6")
    model.close()  # nothing was started: nothing to close
