"""``AgentOptions`` on every runtime (H.2): an agent and a durable step take their settings
from one options object, and a keyword passed explicitly overrides the options object's field
(``None`` included), on asyncio, trio and blocking alike."""

from __future__ import annotations

from typing import Any

from coder_integrations.fake_server import FakeCoderServer
from coder_io_asyncio import AgentOptions, CoderChatError, tool
from coder_proto.durable import MemoryStore
from coder_proto.fake import Say, Script, Wait


def recording_tool(calls: list[str], label: str) -> Any:
    @tool
    def get_weather(city: str) -> dict[str, Any]:
        """Get the weather for a city."""
        calls.append(f"{label}:{city}")
        return {"city": city, "temp_c": 21}

    return get_weather


def test_an_agent_runs_on_its_options_and_explicit_keywords_override_them(
    runtime: Any, server: FakeCoderServer
) -> None:
    server.config.scripts.add("slow", Script((Say("thinking"), Wait(2.0), Say(" done"))))
    calls: list[str] = []
    # Room for the tool turn's segments on a loaded machine; the slow turn outlasts it.
    options = AgentOptions(
        instructions="Answer in French.",
        tools=[recording_tool(calls, "options")],
        request_timeout=1.0,
    )

    async def scenario(rt: Any) -> Any:
        # Every setting from the options object: its tools, its instructions, its timeout.
        agent = await rt.agent(server, options=options)
        weather = await rt.generate(agent, "What is the weather in Paris?")
        try:
            await rt.generate(agent, "slow please")
        except CoderChatError as exc:
            timed_out = exc
        chat = agent.chat_id
        await rt.close(agent)
        # Keywords win: other tools, and no limit at all (an explicit None).
        other = await rt.agent(
            server, options=options, tools=[recording_tool(calls, "keyword")], request_timeout=None
        )
        again = await rt.generate(other, "What is the weather in Rome?")
        slow = await rt.generate(other, "slow please")
        await rt.close(other)
        return weather, timed_out, chat, again, slow

    weather, timed_out, chat, again, slow = runtime.run(scenario)
    assert calls == ["options:Paris", "keyword:Rome"]
    assert weather.text == 'get_weather returned {"city":"Paris","temp_c":21}.'
    assert server.model.chats[chat].system_prompt == "Answer in French."
    assert timed_out.kind == "timeout" and "1s request_timeout" in str(timed_out)
    assert again.text == 'get_weather returned {"city":"Rome","temp_c":21}.'
    assert slow.text == "thinking done" and slow.finish_reason == "stop"
    # The options object itself is unchanged by the overrides.
    assert options.request_timeout == 1.0 and list(options.tools) == ["get_weather"]


def test_a_durable_step_runs_on_its_options_and_explicit_keywords_override_them(
    runtime: Any, server: FakeCoderServer
) -> None:
    calls: list[str] = []
    options = AgentOptions(
        organization_id=server.organization_id,
        instructions="Be brief.",
        tools=[recording_tool(calls, "options")],
        settle_retry_delay=0.05,
    )
    connection = {"base_url": server.url, "token": server.token}

    async def scenario(rt: Any) -> Any:
        store = MemoryStore()
        first = await rt.durable(
            "run_turn",
            "wf-options",
            "What is the weather in Paris?",
            step="paris",
            store=store,
            options=options,
            poll_interval=0.05,
            **connection,
        )
        second = await rt.durable(
            "run_turn",
            "wf-options",
            "What is the weather in Rome?",
            step="rome",
            store=store,
            options=options,
            tools=[recording_tool(calls, "keyword")],
            poll_interval=0.05,
            **connection,
        )
        await rt.durable(
            "archive_workflow", "wf-options", store=store, settle_retry_delay=0.05, **connection
        )
        return first, second

    first, second = runtime.run(scenario)
    assert calls == ["options:Paris", "keyword:Rome"]
    assert first.chat_id == second.chat_id
    assert second.text == 'get_weather returned {"city":"Rome","temp_c":21}.'
    assert server.model.chats[first.chat_id].system_prompt == "Be brief."
