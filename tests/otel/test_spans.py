"""OpenTelemetry spans and metrics of agents and clients on asyncio, trio and blocking, against
the fake server over loopback (docs/observability.md): the span tree of a turn, a tool loop,
a dropped stream, errors, promotions, and the metrics."""

from __future__ import annotations

from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_integrations.otel import instrument as otel_instrument
from coder_proto import CoderChatError, CoderNetworkError, GenerateResult, tool
from coder_proto.fake import CallClientTool, Fail, Say, Script, Wait

from .conftest import Telemetry

LONG_TEXT = " ".join(f"word{i}" for i in range(60))


def _instrument(rt: Any, target: Any, telemetry: Telemetry, **kwargs: Any) -> Any:
    """``instrument`` as the adapter re-exports it."""
    return rt.adapter.instrument(
        target,
        tracer_provider=telemetry.tracer_provider,
        meter_provider=telemetry.meter_provider,
        **kwargs,
    )


def _points(telemetry: Telemetry, name: str, **attributes: Any) -> list[Any]:
    return [
        p
        for p in telemetry.metrics().get(name, [])
        if all(p.attributes.get(k) == v for k, v in attributes.items())
    ]


# -- a plain turn ---------------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["generate", "stream"])
def test_a_turn_is_an_invoke_agent_span_with_a_chat_step_and_its_rest_calls(
    runtime: Any, server: FakeCoderServer, telemetry: Telemetry, mode: str
) -> None:
    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        assert _instrument(rt, agent, telemetry, agent_name="helper") is agent
        if mode == "generate":
            result = await rt.generate(agent, "hello there")
        else:
            streamed = await rt.stream(agent, "hello there")
            assert streamed.error is None
            result = streamed.result
        chat_id = agent.chat_id
        await rt.close(agent)
        return result, chat_id

    result, chat_id = runtime.run(scenario)
    (turn,) = telemetry.named("invoke_agent")
    assert turn.name == "invoke_agent helper"
    assert telemetry.parent_of(turn) is None
    attributes = dict(turn.attributes or {})
    assert attributes["gen_ai.operation.name"] == "invoke_agent"
    assert attributes["gen_ai.provider.name"] == "coder"
    assert attributes["gen_ai.agent.name"] == "helper"
    assert attributes["gen_ai.conversation.id"] == chat_id == result.chat_id
    assert attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert attributes["coder.turn.streaming"] is (mode == "stream")
    assert attributes["coder.turn.steps"] == 1
    assert attributes["server.address"] == "127.0.0.1"
    usage = result.usage
    assert attributes["gen_ai.usage.input_tokens"] == usage.input_tokens
    assert attributes["gen_ai.usage.output_tokens"] == usage.output_tokens
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == usage.cache_read_tokens
    assert attributes["gen_ai.usage.cache_creation.input_tokens"] == usage.cache_write_tokens
    assert turn.status.is_ok

    (step,) = telemetry.named("chat")
    assert telemetry.parent_of(step) is turn
    step_attributes = dict(step.attributes or {})
    assert step_attributes["gen_ai.operation.name"] == "chat"
    assert step_attributes["gen_ai.conversation.id"] == chat_id
    assert step_attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert step_attributes["gen_ai.usage.output_tokens"] == result.steps[0].usage.output_tokens
    assert turn.start_time <= step.start_time and step.end_time <= turn.end_time

    # The REST call that started the round trip belongs to it; the disposal's come after.
    (create,) = telemetry.named("POST /api/v2/chats")
    assert telemetry.parent_of(create) is step
    create_attributes = dict(create.attributes or {})
    assert create_attributes["http.request.method"] == "POST"
    assert create_attributes["url.template"] == "/api/v2/chats"
    assert create_attributes["http.response.status_code"] == 201
    assert create_attributes["coder.operation"] == "create_chat"
    (archive,) = telemetry.named("PATCH /api/v2/chats/{chat}")
    assert telemetry.parent_of(archive) is None
    assert archive.attributes["http.response.status_code"] == 204

    tokens = _points(
        telemetry, "gen_ai.client.token.usage", **{"gen_ai.operation.name": "invoke_agent"}
    )
    by_type = {p.attributes["gen_ai.token.type"]: p.sum for p in tokens}
    assert by_type == {"input": usage.input_tokens, "output": usage.output_tokens}
    durations = telemetry.metrics()["gen_ai.client.operation.duration"]
    assert sorted(p.attributes["gen_ai.operation.name"] for p in durations) == [
        "chat",
        "invoke_agent",
    ]
    assert all(p.count == 1 and "error.type" not in p.attributes for p in durations)
    assert "coder.stream.drops" not in telemetry.metrics()


def test_a_turn_nests_under_the_callers_current_span(
    runtime: Any, server: FakeCoderServer, telemetry: Telemetry
) -> None:
    tracer = telemetry.tracer_provider.get_tracer("app")

    async def scenario(rt: Any) -> None:
        agent = await rt.agent(server)
        _instrument(rt, agent, telemetry)
        with tracer.start_as_current_span("request"):
            await rt.generate(agent, "hello")
        await rt.close(agent)

    runtime.run(scenario)
    (request,) = telemetry.named("request")
    (turn,) = telemetry.named("invoke_agent")
    assert telemetry.parent_of(turn) is request


# -- a dropped stream -----------------------------------------------------------------------------


def test_a_dropped_stream_is_a_drop_and_a_redial_on_the_step_and_counted(
    runtime: Any, server: FakeCoderServer, telemetry: Telemetry
) -> None:
    server.config.scripts.add("long", Script((Say(LONG_TEXT, chunk=7),), chunk_delay=0.003))
    server.faults.drop_stream_at("message_part", occurrence=12)

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        _instrument(rt, agent, telemetry)
        result = await rt.generate(agent, "say something long")
        await rt.close(agent)
        return result

    result = runtime.run(scenario)
    assert result.text == LONG_TEXT
    (step,) = telemetry.named("chat")
    names = [event.name for event in step.events]
    assert names == ["coder.stream.drop", "coder.stream.redial"]
    drop, redial = step.events
    assert drop.attributes["coder.stream.attempt"] == 1
    assert isinstance(drop.attributes["coder.stream.close_code"], int)
    assert redial.attributes["coder.stream.consecutive_failures"] == 1
    assert redial.attributes["coder.stream.backoff"] > 0
    assert step.start_time <= drop.timestamp <= step.end_time
    (turn,) = telemetry.named("invoke_agent")
    assert turn.status.is_ok and telemetry.parent_of(step) is turn
    metrics = telemetry.metrics()
    assert [p.value for p in metrics["coder.stream.drops"]] == [1]
    assert [p.value for p in metrics["coder.stream.redials"]] == [1]
    assert metrics["coder.stream.redials"][0].attributes["gen_ai.provider.name"] == "coder"


def test_a_rejected_stream_upgrade_is_a_stream_error_event_then_a_redial(
    runtime: Any, server: FakeCoderServer, telemetry: Telemetry
) -> None:
    server.faults.reject_upgrades(503, times=1)

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        _instrument(rt, agent, telemetry)
        result = await rt.generate(agent, "hello")
        await rt.close(agent)
        return result

    result = runtime.run(scenario)
    assert result.text
    (step,) = telemetry.named("chat")
    names = [event.name for event in step.events]
    assert "coder.stream.error" in names and "coder.stream.redial" in names
    (error,) = [event for event in step.events if event.name == "coder.stream.error"]
    assert "503" in error.attributes["coder.stream.error"]
    assert [p.value for p in telemetry.metrics()["coder.stream.redials"]] == [1]


# -- the client-tool loop -------------------------------------------------------------------------


def _weather_script() -> Script:
    return Script(
        (
            Say("Checking the weather."),
            CallClientTool(name="get_weather", args={"city": "Bern"}),
            Say("It is {tool_result.temp_c} degrees."),
        )
    )


def test_a_tool_loop_has_an_execute_tool_span_current_while_the_tool_runs(
    runtime: Any, server: FakeCoderServer, telemetry: Telemetry
) -> None:
    _tool_loop(runtime, server, telemetry, "plain")


def test_a_coroutine_tool_runs_with_its_execute_tool_span_current(
    loop_runtime: Any, server: FakeCoderServer, telemetry: Telemetry
) -> None:
    _tool_loop(loop_runtime, server, telemetry, "coroutine")


def _tool_loop(runtime: Any, server: FakeCoderServer, telemetry: Telemetry, kind: str) -> None:
    """A tool loop whose tool opens a span of its own: the span tree and the attributes."""
    server.config.scripts.add("weather", _weather_script())
    tracer = telemetry.tracer_provider.get_tracer("app")

    if kind == "plain":

        @tool
        def get_weather(city: str) -> dict[str, Any]:
            """Get the weather for a city."""
            with tracer.start_as_current_span("weather lookup"):
                return {"city": city, "temp_c": 21}

    else:

        @tool
        async def get_weather(city: str) -> dict[str, Any]:
            """Get the weather for a city."""
            with tracer.start_as_current_span("weather lookup"):
                return {"city": city, "temp_c": 21}

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, tools=[get_weather])
        _instrument(rt, agent, telemetry)
        result = await rt.generate(agent, "weather in Bern")
        await rt.close(agent)
        return result

    result = runtime.run(scenario)
    assert result.text == "It is 21 degrees."
    (turn,) = telemetry.named("invoke_agent")
    first, second = telemetry.named("chat")
    (execute,) = telemetry.named("execute_tool")
    (lookup,) = telemetry.named("weather lookup")
    assert execute.name == "execute_tool get_weather"
    assert telemetry.parent_of(first) is turn
    assert telemetry.parent_of(second) is turn
    assert telemetry.parent_of(execute) is turn
    assert telemetry.parent_of(lookup) is execute
    assert first.end_time <= execute.start_time and execute.end_time <= second.start_time
    call_id = result.steps[0].tool_calls[0].tool_call_id
    attributes = dict(execute.attributes or {})
    assert attributes["gen_ai.operation.name"] == "execute_tool"
    assert attributes["gen_ai.tool.name"] == "get_weather"
    assert attributes["gen_ai.tool.call.id"] == call_id
    assert attributes["gen_ai.tool.type"] == "function"
    assert attributes["gen_ai.tool.description"] == "Get the weather for a city."
    assert attributes["gen_ai.conversation.id"] == result.chat_id
    assert execute.status.is_ok
    assert first.attributes["gen_ai.response.finish_reasons"] == ("tool-calls",)
    assert second.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert first.attributes["gen_ai.usage.input_tokens"] == result.steps[0].usage.input_tokens
    assert second.attributes["gen_ai.usage.input_tokens"] == result.steps[1].usage.input_tokens
    assert turn.attributes["coder.turn.steps"] == 2
    assert turn.attributes["gen_ai.usage.input_tokens"] == result.usage.input_tokens
    (submit,) = telemetry.named("POST /api/v2/chats/{chat}/tool-results")
    assert telemetry.parent_of(submit) in (second, turn)
    assert submit.attributes["url.template"] == "/api/v2/chats/{chat}/tool-results"


def test_a_tool_that_raises_records_its_error_class_on_execute_tool(
    runtime: Any, server: FakeCoderServer, telemetry: Telemetry
) -> None:
    server.config.scripts.add("weather", _weather_script())

    @tool
    def get_weather(city: str) -> dict[str, Any]:
        """Get the weather for a city."""
        raise LookupError(f"no station in {city}")

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, tools=[get_weather])
        _instrument(rt, agent, telemetry)
        result = await rt.generate(agent, "weather in Bern")
        await rt.close(agent)
        return result

    runtime.run(scenario)
    (execute,) = telemetry.named("execute_tool")
    assert execute.attributes["error.type"] == "LookupError"
    assert not execute.status.is_ok
    (exception,) = [e for e in execute.events if e.name == "exception"]
    assert exception.attributes["exception.type"].endswith("LookupError")
    (turn,) = telemetry.named("invoke_agent")
    assert turn.status.is_ok


# -- errors -----------------------------------------------------------------------------------------


def test_a_failed_turn_records_the_error_class_and_retryability(
    runtime: Any, server: FakeCoderServer, telemetry: Telemetry
) -> None:
    """``generate`` raises the run's error: the turn span records it."""
    server.config.scripts.add(
        "doomed", Script((Say("partial "), Fail(message="model overloaded", retryable=True)))
    )

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        _instrument(rt, agent, telemetry)
        try:
            await rt.generate(agent, "doomed turn")
        except CoderChatError as exc:
            error: Any = exc
        else:  # pragma: no cover - the script fails the turn
            error = None
        await rt.close(agent)
        return error

    error = runtime.run(scenario)
    assert isinstance(error, CoderChatError)
    (turn,) = telemetry.named("invoke_agent")
    assert turn.attributes["error.type"] == "CoderChatError"
    assert turn.attributes["coder.error.retryable"] is error.retryable
    assert not turn.status.is_ok
    assert any(e.name == "exception" for e in turn.events)
    (step,) = telemetry.named("chat")
    assert step.attributes["error.type"]
    assert not step.status.is_ok
    assert step.attributes["error.type"] == "CoderChatError"
    failed = _points(
        telemetry, "gen_ai.client.operation.duration", **{"error.type": "CoderChatError"}
    )
    assert sorted(p.attributes["gen_ai.operation.name"] for p in failed) == ["chat", "invoke_agent"]


def test_a_stream_whose_result_carries_the_runs_error_records_it(
    runtime: Any, server: FakeCoderServer, telemetry: Telemetry
) -> None:
    server.config.scripts.add("doomed", Script((Say("partial "), Fail(message="model overloaded"))))

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        _instrument(rt, agent, telemetry)
        streamed = await rt.stream(agent, "doomed turn")
        await rt.close(agent)
        return streamed

    streamed = runtime.run(scenario)
    assert streamed.error is None and streamed.result.error is not None
    (turn,) = telemetry.named("invoke_agent")
    assert turn.attributes["error.type"] == type(streamed.result.error).__name__
    assert turn.attributes["gen_ai.response.finish_reasons"] == ("error",)
    assert not turn.status.is_ok


def test_a_tool_cancelled_with_its_turn_records_the_cancellation(
    loop_runtime: Any, server: FakeCoderServer, telemetry: Telemetry
) -> None:
    server.config.scripts.add("weather", _weather_script())
    started: list[str] = []

    @tool
    async def get_weather(city: str) -> dict[str, Any]:
        """Get the weather for a city."""
        started.append(city)
        if loop_runtime.name == "trio":
            import trio

            await trio.sleep(30)
        else:
            import asyncio

            await asyncio.sleep(30)
        return {"city": city, "temp_c": 21}  # pragma: no cover - cancelled before

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, tools=[get_weather])
        _instrument(rt, agent, telemetry)
        error = await rt.generate_within(agent, "weather in Bern", 1.0)
        await rt.close(agent)
        return error

    error = loop_runtime.run(scenario)
    assert isinstance(error, loop_runtime.deadline_error) and started == ["Bern"]
    (execute,) = telemetry.named("execute_tool")
    assert execute.attributes["error.type"] == loop_runtime.cancel_error.__name__
    (turn,) = telemetry.named("invoke_agent")
    assert turn.attributes["error.type"] in (
        loop_runtime.cancel_error.__name__,
        loop_runtime.deadline_error.__name__,
    )
    assert not turn.status.is_ok


def test_the_model_hint_is_the_request_model(
    runtime: Any, server: FakeCoderServer, telemetry: Telemetry
) -> None:
    async def scenario(rt: Any) -> None:
        agent = await rt.agent(server, model="gpt-5")
        _instrument(rt, agent, telemetry)
        await rt.generate(agent, "hello")
        await rt.close(agent)

    runtime.run(scenario)
    (turn,) = telemetry.named("invoke_agent")
    (step,) = telemetry.named("chat")
    assert step.name == "chat gpt-5"
    assert (
        turn.attributes["gen_ai.request.model"]
        == step.attributes["gen_ai.request.model"]
        == "gpt-5"
    )
    for points in telemetry.metrics().values():
        assert all(p.attributes["gen_ai.request.model"] == "gpt-5" for p in points)


def test_a_stream_left_early_ends_its_turn_span(
    runtime: Any, server: FakeCoderServer, telemetry: Telemetry
) -> None:
    server.config.scripts.add("long", Script((Say(LONG_TEXT, chunk=7),), chunk_delay=0.003))

    async def scenario(rt: Any) -> None:
        agent = await rt.agent(server)
        _instrument(rt, agent, telemetry)
        parts = await rt.stream_first(agent, "say something long", 3)
        assert len(parts) == 3
        await rt.close(agent)

    runtime.run(scenario)
    (turn,) = telemetry.named("invoke_agent")
    assert turn.end_time is not None
    assert "gen_ai.response.finish_reasons" not in (turn.attributes or {})
    (step,) = telemetry.named("chat")
    assert telemetry.parent_of(step) is turn


def test_a_stream_read_to_its_end_without_the_final_result_still_reports_usage(
    runtime: Any, server: FakeCoderServer, telemetry: Telemetry
) -> None:
    async def scenario(rt: Any) -> None:
        agent = await rt.agent(server)
        _instrument(rt, agent, telemetry)
        if rt.name == "sync":
            with agent.stream("hello") as stream:
                for _part in stream:
                    pass
        else:
            async with agent.stream("hello") as stream:
                async for _part in stream:
                    pass
        await rt.close(agent)

    runtime.run(scenario)
    (turn,) = telemetry.named("invoke_agent")
    assert turn.attributes["gen_ai.response.finish_reasons"] == ("stop",)
    assert turn.attributes["gen_ai.usage.output_tokens"] > 0


# -- several agents, promotions, clients -----------------------------------------------------------


def test_a_promotion_is_an_event_of_the_settled_turn(
    runtime: Any, server: FakeCoderServer, telemetry: Telemetry
) -> None:
    server.config.stamp_promotions = True
    server.config.scripts.add("slow", Script((Say("first part "), Wait(0.4), Say("first done"))))
    server.config.scripts.add("queued", Script((Say("second answer"),)))

    async def scenario(rt: Any) -> Any:
        owner = await rt.agent(server)
        await rt.generate(owner, "hello")
        other = await rt.agent(server, chat_id=owner.chat_id)
        _instrument(rt, owner, telemetry, agent_name="owner")
        _instrument(rt, other, telemetry, agent_name="other")
        slow, _queued = await rt.concurrently(
            lambda: rt.generate(owner, "slow turn"),
            lambda: rt.generate(other, "queued turn"),
            stagger=0.15,
        )
        await rt.close(owner)
        await rt.close(other)
        return slow

    slow = runtime.run(scenario)
    assert isinstance(slow, GenerateResult) and slow.settled_by == "promotion"
    (owner,) = telemetry.named("invoke_agent owner")
    (other,) = telemetry.named("invoke_agent other")
    assert owner.attributes["coder.turn.settled_by"] == "promotion"
    assert [e.name for e in owner.events] == ["coder.turn.promotion"]
    assert "coder.turn.settled_by" not in (other.attributes or {})
    # Each agent's steps are its own.
    for turn in (owner, other):
        steps = [s for s in telemetry.named("chat") if telemetry.parent_of(s) is turn]
        assert len(steps) == 1


def test_agents_sharing_a_client_keep_their_spans_apart(
    runtime: Any, server: FakeCoderServer, telemetry: Telemetry
) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        first = await rt.agent(
            server, client=client, base_url=None, token=None, organization_id=server.organization_id
        )
        second = await rt.agent(
            server, client=client, base_url=None, token=None, organization_id=server.organization_id
        )
        _instrument(rt, first, telemetry, agent_name="first")
        _instrument(rt, second, telemetry, agent_name="second")
        await rt.generate(first, "hello")
        await rt.generate(second, "hi")
        await rt.generate(first, "hello again")
        await rt.close(first)
        await rt.close(second)
        await rt.close_client(client)

    runtime.run(scenario)
    firsts = telemetry.named("invoke_agent first")
    (second,) = telemetry.named("invoke_agent second")
    assert len(firsts) == 2
    steps = telemetry.named("chat")
    assert len(steps) == 3
    parents = sorted(telemetry.parent_of(s).name for s in steps)  # type: ignore[union-attr]
    assert parents == ["invoke_agent first", "invoke_agent first", "invoke_agent second"]

    # Each REST call that started a round trip is under that agent's turn.
    def root(span: Any) -> Any:
        while telemetry.parent_of(span) is not None:
            span = telemetry.parent_of(span)
        return span

    creates = telemetry.named("POST /api/v2/chats")
    assert sorted(root(s).name for s in creates) == ["invoke_agent first", "invoke_agent second"]
    (message,) = telemetry.named("POST /api/v2/chats/{chat}/messages")
    assert root(message) is firsts[1]
    assert (
        firsts[0].attributes["gen_ai.conversation.id"]
        == firsts[1].attributes["gen_ai.conversation.id"]
    )
    assert (
        second.attributes["gen_ai.conversation.id"]
        != firsts[0].attributes["gen_ai.conversation.id"]
    )


def test_an_instrumented_client_traces_its_rest_calls(
    runtime: Any, server: FakeCoderServer, telemetry: Telemetry
) -> None:
    async def scenario(rt: Any) -> Any:
        client = await rt.client(server)
        assert _instrument(rt, client, telemetry) is client
        _instrument(rt, client, telemetry)
        chats = await rt.call(client, "list_chats")
        try:
            await rt.call(client, "get_chat", "6f0d3d1c-0000-4000-8000-000000000000")
        except Exception as exc:
            missing: Any = exc
        await rt.close_client(client)
        return chats, missing

    _chats, missing = runtime.run(scenario)
    (listed,) = telemetry.named("GET /api/v2/chats")
    assert listed.attributes["http.response.status_code"] == 200
    assert listed.attributes["coder.operation"] == "list_chats"
    assert listed.kind.name == "CLIENT"
    (got,) = telemetry.named("GET /api/v2/chats/{chat}")
    assert got.attributes["http.response.status_code"] == 404
    assert got.attributes["error.type"] == "404"
    assert not got.status.is_ok
    assert getattr(missing, "status", None) == 404


def test_a_rest_call_that_gets_no_answer_records_the_failure_class(telemetry: Telemetry) -> None:
    import socket

    import coder_io_sync

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    client = coder_io_sync.CoderChatClient(f"http://127.0.0.1:{port}", "secret-token-value")
    otel_instrument(
        client, tracer_provider=telemetry.tracer_provider, meter_provider=telemetry.meter_provider
    )
    with client, pytest.raises(CoderNetworkError):
        client.list_chats()
    (span,) = telemetry.named("GET /api/v2/chats")
    assert span.attributes["error.type"] == "ConnectError"
    assert "http.response.status_code" not in (span.attributes or {})
    assert not any("secret-token-value" in text for text in telemetry.texts())


def test_instrument_refuses_what_is_neither_an_agent_nor_a_client(telemetry: Telemetry) -> None:
    with pytest.raises(TypeError, match="CoderAgent or a CoderChatClient"):
        otel_instrument(object(), tracer_provider=telemetry.tracer_provider)
