"""The pytest plugin, run the way its users run it: test files in a temporary project,
executed by ``pytester`` with the plugin loaded from its entry point."""

from __future__ import annotations

import pytest

pytest_plugins = ["pytester"]

AGENT_CODE = '''
from coder_io_asyncio import tool as async_tool


def get_weather(city: str) -> dict:
    """Get the weather for a city."""
    return {"city": city, "temp_c": 21}


async def forecast(agent, city):
    result = await agent.generate(f"Weather in {city}?")
    return result.text
'''


def run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", *args)


def test_the_plugin_is_registered_by_its_entry_point(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        def test_fixtures_exist(request):
            for name in ("coder_fake", "coder_fake_session", "coder_connection",
                         "coder_agent", "coder_client", "coder_sync_agent",
                         "coder_sync_client", "coder_script_book"):
                request._fixturemanager.getfixturedefs(name, request.node)
            assert request.config.pluginmanager.has_plugin("coder_agents")
        """
    )
    run(pytester, "--strict-markers").assert_outcomes(passed=1)


def test_async_agent_on_asyncio_and_trio(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(agentcode=AGENT_CODE)
    pytester.makepyfile(
        """
        import pytest
        from coder_proto.fake import CallClientTool, Say, Wait
        from agentcode import forecast, get_weather

        @pytest.fixture(params=["asyncio", "trio"])
        def anyio_backend(request):
            return request.param

        @pytest.mark.anyio
        @pytest.mark.coder_agent(tools=[get_weather])
        @pytest.mark.coder_script(CallClientTool(name="get_weather", args={"city": "Oslo"}),
                                  Say("Oslo: {tool_result}"), match="Oslo")
        async def test_forecast(coder_agent, coder_fake):
            assert await forecast(coder_agent, "Oslo") == 'Oslo: {"city":"Oslo","temp_c":21}'
            coder_fake.assert_prompted(r"Weather in Oslo")
            coder_fake.assert_tool_result("get_weather", {"city": "Oslo", "temp_c": 21})
            assert coder_fake.prompts() == ["Weather in Oslo?"]
            coder_fake.assert_not_archived()
            await coder_agent.archive()
            coder_fake.assert_archived()

        @pytest.mark.anyio
        @pytest.mark.coder_script(Say("slow"), Wait(30), Say("never"))
        async def test_leaving_a_stream(coder_agent, coder_fake):
            async with coder_agent.stream("Go slowly.") as stream:
                async for delta in stream.text_stream:
                    break
            assert await coder_fake.until(coder_fake.interrupts) == 1

        @pytest.mark.anyio
        async def test_client(coder_client, coder_fake):
            chat = await coder_client.create_chat(
                organization_id=coder_fake.organization_id, content="Hello from the client")
            assert [c.id for c in await coder_client.list_chats()] == [chat.id]
            assert coder_fake.prompts(chat.id) == ["Hello from the client"]
        """
    )
    run(pytester, "--strict-markers", "-v").assert_outcomes(passed=6)


def test_blocking_agent_with_a_drop_and_an_interrupt(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(agentcode=AGENT_CODE)
    pytester.makepyfile(
        """
        import pytest
        from coder_proto.fake import CallClientTool, Say, Wait
        from agentcode import get_weather

        @pytest.mark.coder_agent(tools=[get_weather])
        @pytest.mark.coder_script(CallClientTool(name="get_weather", args={"city": "Rome"}),
                                  Say("It is {tool_result} in Rome, as always.", chunk=3))
        def test_drop_is_healed(coder_sync_agent, coder_fake):
            coder_fake.faults.drop_stream_at("message_part", occurrence=3)
            result = coder_sync_agent.generate("Weather in Rome?", timeout=30)
            assert result.text == 'It is {"city":"Rome","temp_c":21} in Rome, as always.'
            chat = coder_fake.chat()
            assert coder_fake.server.counters.stream_dials[chat.id] >= 2
            [outcome] = coder_fake.tool_results(chat.id)
            assert outcome["tool_name"] == "get_weather" and outcome["is_error"] is False
            coder_fake.assert_not_interrupted()

        @pytest.mark.coder_script(Say("slow"), Wait(30), Say("never"))
        def test_leaving_a_stream_interrupts(coder_sync_agent, coder_fake):
            with coder_sync_agent.stream("Go slowly.") as stream:
                for delta in stream.text_stream:
                    break
            # The interrupt goes out in the background.
            assert coder_fake.wait_until(coder_fake.interrupts) == 1
            coder_fake.assert_interrupted()
        """
    )
    run(pytester, "--strict-markers", "-v").assert_outcomes(passed=2)


def test_script_book_fixture_and_fake_options(pytester: pytest.Pytester) -> None:
    pytester.makeconftest(
        """
        import pytest

        @pytest.fixture
        def coder_script_book():
            return {"rules": [{"match": "hello", "script": {"items": [
                {"type": "say", "text": "Hi from the book."}]}}]}
        """
    )
    pytester.makepyfile(
        """
        import pytest
        from coder_proto.fake import Say

        def test_book(coder_sync_agent):
            assert coder_sync_agent.generate("hello there").text == "Hi from the book."

        @pytest.mark.coder_script(Say("default answer"))
        def test_marker_default_beside_the_book(coder_sync_agent, coder_fake):
            assert coder_sync_agent.generate("something else").text == "default answer"
            coder_fake.push(Say("one shot"))
            assert coder_sync_agent.generate("hello").text == "one shot"

        @pytest.mark.coder_fake(chunk_delay=0.002)
        def test_options(coder_fake):
            assert coder_fake.server.config.chunk_delay == 0.002

        def test_connection(coder_connection, coder_fake):
            assert coder_connection == {"base_url": coder_fake.url, "token": coder_fake.token,
                                        "organization_id": coder_fake.organization_id}
        """
    )
    run(pytester, "--strict-markers").assert_outcomes(passed=4)


def test_session_fake_is_shared(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        urls = []

        def test_one(coder_fake_session):
            urls.append(coder_fake_session.url)

        def test_two(coder_fake_session, coder_fake):
            urls.append(coder_fake_session.url)
            assert urls[0] == urls[1]
            assert coder_fake.url != coder_fake_session.url
        """
    )
    run(pytester).assert_outcomes(passed=2)


def test_assertion_helpers_say_what_the_fake_received(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        def test_prompt_missing(coder_sync_agent, coder_fake):
            coder_sync_agent.generate("Summarize the logs.")
            coder_fake.assert_prompted("deploy")

        def test_tool_result_missing(coder_sync_agent, coder_fake):
            coder_sync_agent.generate("hi")
            coder_fake.assert_tool_result("get_weather")

        def test_no_chat(coder_fake):
            coder_fake.assert_archived()

        def test_not_interrupted(coder_sync_agent, coder_fake):
            coder_sync_agent.generate("hi")
            coder_fake.assert_interrupted()

        @pytest.mark.coder_fake(1)
        def test_bad_marker(coder_fake):
            pass
        """
    )
    result = run(pytester)
    result.assert_outcomes(failed=4, errors=1)
    output = result.stdout.str()
    for line in [
        "E       AssertionError: no prompt matches 'deploy'; the fake received "
        "['Summarize the logs.']",
        "E       AssertionError: no tool result get_weather; the fake received []",
        "E       AssertionError: expected exactly one chat on the fake, found 0",
        "was never interrupted",
        "TypeError: coder_fake takes keyword arguments only",
    ]:
        assert line in output
    # The helpers hide their own frames: the failure points at the user's line.
    assert '>       coder_fake.assert_prompted("deploy")' in output


def test_chats_are_archived_when_the_agent_fixture_ends(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(
        """
        import pytest

        seen = {}

        @pytest.fixture
        def check(coder_fake):
            yield
            # Runs after coder_sync_agent closed (fixtures end in reverse order).
            seen["archived"] = coder_fake.archived_chat_ids()

        def test_turn(coder_fake, check, coder_sync_agent):
            seen["chat"] = coder_sync_agent.generate("hi").chat_id

        def test_after():
            assert seen["archived"] == [seen["chat"]]
        """
    )
    run(pytester).assert_outcomes(passed=2)


def test_the_documented_example(pytester: pytest.Pytester) -> None:
    """docs/pytest-plugin.md's ten-line test, as written there."""
    pytester.mkpydir("myapp")
    pytester.path.joinpath("myapp", "weather.py").write_text(
        '''
def get_weather(city: str) -> dict:
    """Get the weather for a city."""
    return {"city": city, "temp_c": 21}


async def forecast(agent, city: str) -> str:
    return (await agent.generate(f"Weather in {city}?")).text
'''
    )
    pytester.makepyfile(
        test_weather="""
        import pytest
        from coder_proto.fake import CallClientTool, Say
        from myapp.weather import forecast, get_weather

        @pytest.mark.anyio
        @pytest.mark.coder_agent(tools=[get_weather])
        @pytest.mark.coder_script(CallClientTool(name="get_weather", args={"city": "Oslo"}),
                                  Say("Oslo: {tool_result}"))
        async def test_forecast(coder_agent, coder_fake):
            coder_fake.faults.drop_stream_at("message_part", occurrence=3)  # a drop mid-turn
            assert await forecast(coder_agent, "Oslo") == 'Oslo: {"city":"Oslo","temp_c":21}'
            coder_fake.assert_prompted("Weather in Oslo")
            coder_fake.assert_tool_result("get_weather", {"city": "Oslo", "temp_c": 21})
        """
    )
    pytester.syspathinsert()
    result = run(pytester, "-v")
    # anyio runs it on every backend it finds: asyncio, and trio (installed here).
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["*test_forecast?asyncio? PASSED*", "*test_forecast?trio? PASSED*"])
