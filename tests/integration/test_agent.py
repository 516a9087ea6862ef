"""``CoderAgent`` against the fake Coder server over loopback, one scenario body for every
runtime (``runtime`` fixture). Each scenario cites the rule it shows; every test also proves
that the session token leaked nowhere (the ``make_server`` fixture)."""

from __future__ import annotations

import pathlib
import time
from typing import Any, Literal

import attrs
import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_io_asyncio import (
    AttachedFile,
    Attachment,
    CoderAgentError,
    CoderApiError,
    CoderChatError,
    CoderStreamError,
    ErrorPart,
    Finish,
    GenerateResult,
    StructuredOutputError,
    tool,
)
from coder_proto._stream.reader import BackoffPolicy
from coder_proto.fake import CallClientTool, Fail, Say, Script, ScriptBook, Wait
from coder_proto.fake._faults import SNAPSHOT_FAILED, SUBSCRIBE_FAILED
from tests.runtimes import Streamed

from .conftest import MakeServer

LONG_TEXT = " ".join(f"word{i}" for i in range(60))


def ops(server: FakeCoderServer, op: str) -> int:
    return int(server.counters.requests[op])


def running(server: FakeCoderServer, chat_id: str | None) -> bool:
    """Whether the server runs a turn on ``chat_id`` (``None``: the chat is not known yet)."""
    return chat_id is not None and server.model.chat(chat_id).status == "running"


def user_texts(history: list[Any]) -> list[str]:
    return [p.text for m in history if m.role == "user" for p in m.parts if hasattr(p, "text")]


def weather_tool() -> tuple[Any, list[str]]:
    """A plain client tool and the cities it was called with."""
    cities: list[str] = []

    @tool
    def get_weather(city: str) -> dict[str, Any]:
        """Get the weather for a city."""
        cities.append(city)
        return {"city": city, "temp_c": 21}

    return get_weather, cities


# -- sessions (H.1, D.1) ---------------------------------------------------------------------


def test_h1_turns_share_one_chat_and_the_server_keeps_the_history(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        first = await rt.generate(agent, "My name is Ada.")
        second = await rt.generate(agent, "What is my name?")
        history = await rt.history(agent)
        chat_id = agent.chat_id
        await rt.close(agent)
        return first, second, history, chat_id

    first, second, history, chat_id = runtime.run(scenario)
    assert first.chat_id == second.chat_id == chat_id
    assert first.text == "You said: My name is Ada."
    assert second.text == "You said: What is my name?"
    assert second.last_seen_message_id > first.last_seen_message_id
    assert user_texts(history) == ["My name is Ada.", "What is my name?"]
    assert ops(server, "create_chat") == 1 and ops(server, "create_chat_message") == 1


def test_d1_resume_from_a_chat_id_with_and_without_a_cursor(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> Any:
        first_agent = await rt.agent(server)
        first = await rt.generate(first_agent, "remember the number 7")
        seeds_before = ops(server, "get_messages")
        resumed = await rt.agent(
            server, chat_id=first.chat_id, last_seen_message_id=first.last_seen_message_id
        )
        with_cursor = await rt.generate(resumed, "which number?")
        seeds_with_cursor = ops(server, "get_messages") - seeds_before
        bare = await rt.agent(server, chat_id=first.chat_id)
        without_cursor = await rt.generate(bare, "and again?")
        seeds_without_cursor = ops(server, "get_messages") - seeds_before - seeds_with_cursor
        for agent in (first_agent, resumed, bare):
            await rt.close(agent)
        return first, with_cursor, seeds_with_cursor, without_cursor, seeds_without_cursor

    first, with_cursor, seeded_with, without_cursor, seeded_without = runtime.run(scenario)
    # Only the new turn's output, never a replay of the earlier one (D.1).
    assert with_cursor.text == "You said: which number?"
    assert without_cursor.text == "You said: and again?"
    assert with_cursor.chat_id == without_cursor.chat_id == first.chat_id
    # A persisted cursor skips the pre-prompt history probe; without one it costs one GET.
    assert seeded_with == 0 and seeded_without == 1
    assert ops(server, "create_chat") == 1


def test_h1_reset_session_starts_a_fresh_chat(runtime: Any, server: FakeCoderServer) -> None:
    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        first = await rt.generate(agent, "one")
        await rt.reset_session(agent)
        state = (agent.chat_id, agent.last_seen_message_id, agent.last_known_chat_id)
        second = await rt.generate(agent, "two")
        await rt.close(agent)
        return first, state, second

    first, state, second = runtime.run(scenario)
    assert state == (None, None, first.chat_id)
    assert second.chat_id != first.chat_id and ops(server, "create_chat") == 2


# -- client tools (G, D5) --------------------------------------------------------------------


def test_g_a_client_tool_round_trip_keeps_one_socket_across_the_pause(
    runtime: Any, server: FakeCoderServer
) -> None:
    get_weather, cities = weather_tool()

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, tools=[get_weather])
        result = await rt.generate(agent, "What is the weather in Paris?")
        streamed = await rt.stream(agent, "And the weather in Rome?")
        await rt.close(agent)
        return result, streamed

    result, streamed = runtime.run(scenario)
    assert cities == ["Paris", "Rome"]
    assert result.text == 'get_weather returned {"city":"Paris","temp_c":21}.'
    assert [s.finish_reason for s in result.steps] == ["tool-calls", "stop"]
    (call,) = result.steps[0].tool_calls
    assert call.tool_name == "get_weather" and not call.provider_executed
    (outcome,) = result.steps[0].tool_results
    assert outcome.result == {"city": "Paris", "temp_c": 21} and not outcome.is_error
    # wire 5: the stream is retained across the pause: one dial per turn.
    assert server.counters.stream_dials[result.chat_id] == 2
    assert server.counters.streams_accepted[result.chat_id] == 2
    (streamed_call,) = streamed.of("ToolCall")
    assert streamed_call.tool_name == "get_weather"
    (first_step, _final) = streamed.result.steps
    assert [r.result for r in first_step.tool_results] == [{"city": "Rome", "temp_c": 21}]
    assert streamed.text.endswith('get_weather returned {"city":"Rome","temp_c":21}.')
    assert streamed.result.finish_reason == "stop" and streamed.error is None


def test_d5_a_raising_tool_and_bad_input_become_error_results(
    runtime: Any, server: FakeCoderServer
) -> None:
    def explode(reason: str) -> str:
        raise RuntimeError(f"cannot {reason}")

    def count(n: int) -> int:
        return n

    server.config.scripts.add(
        "explode",
        Script(
            (
                CallClientTool(name="explode", args={"reason": "comply"}),
                CallClientTool(name="count", args={"n": "three"}),
                CallClientTool(name="missing", args={}),
                Say("results: {tool_results}"),
            )
        ),
    )

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, tools=[explode, count])
        result = await rt.generate(agent, "explode please")
        await rt.close(agent)
        return result

    result = runtime.run(scenario)
    outcomes = {r.tool_name: r for r in result.steps[0].tool_results}
    assert all(o.is_error for o in outcomes.values())
    assert outcomes["explode"].result == "RuntimeError: cannot comply"
    assert "invalid input" in outcomes["count"].result
    assert "unknown tool 'missing'" in outcomes["missing"].result
    assert ops(server, "submit_tool_results") == 1  # D5: one complete set
    assert "cannot comply" in result.text


# -- the stream heals (C.2, B.2) -------------------------------------------------------------


@pytest.mark.parametrize(
    ("unit", "at", "mode"),
    [
        ("frame", 1, "stream"),
        ("frame", 2, "generate"),
        ("delta", 5, "stream"),
        ("delta", 12, "generate"),
        ("delta", 30, "stream"),
        ("delta", 58, "generate"),
    ],
)
def test_c2_a_dropped_stream_redials_with_no_lost_or_duplicated_text(
    runtime: Any, server: FakeCoderServer, unit: str, at: int, mode: str
) -> None:
    """C.2, B.2: the connection ends after its ``at``-th frame, or just before the ``at``-th
    text delta of the 60 the answer streams in."""
    server.config.scripts.add("long", Script((Say(LONG_TEXT, chunk=7),), chunk_delay=0.003))
    if unit == "frame":
        server.faults.drop_stream_after_frames(at)
    else:
        server.faults.drop_stream_at("message_part", occurrence=at)

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        if mode == "stream":
            out: Any = await rt.stream(agent, "say something long")
        else:
            out = await rt.generate(agent, "say something long")
        interrupts = ops(server, "interrupt_chat")
        await rt.close(agent)
        return out, interrupts

    out, interrupts = runtime.run(scenario)
    text = out.text
    assert text == LONG_TEXT
    if isinstance(out, Streamed):
        assert out.error is None and out.result.text == LONG_TEXT
    redials = [e for e in runtime.recorder.events if e.type == "ws:redial"]
    assert len(redials) == 1
    # The server kept generating through the gap: the run was never interrupted (C.2).
    assert interrupts == 0


#: Redials at once (the default schedule waits 1 + 2 + 4 + 8 s before giving up).
QUICK = BackoffPolicy(initial=0.01, multiplier=1.0, cap=0.01)


async def quick_agent(rt: Any, server: FakeCoderServer) -> Any:
    agent = await rt.agent(server)
    session = agent._core.session
    session.config = attrs.evolve(session.config, backoff=QUICK)
    return agent


@pytest.mark.parametrize(
    ("where", "mode"),
    [
        ("first-dial", "stream"),
        ("first-dial", "generate"),
        ("redial", "stream"),
        ("redial", "generate"),
    ],
)
def test_d34_a_stream_session_error_is_redialed_and_the_turn_completes(
    runtime: Any, server: FakeCoderServer, where: str, mode: str
) -> None:
    """D34: the server cannot set up the stream session (one ``error`` event, no kind, not
    retryable, then the close) on the first dial, or on the redial after a mid-turn drop.
    The connection counts as a failed one, the client redials, and the turn completes with
    all of its text, exactly once; no error reaches the caller."""
    server.config.scripts.add("long", Script((Say(LONG_TEXT, chunk=7),), chunk_delay=0.003))
    if where == "first-dial":
        server.faults.fail_snapshots(times=1)
    else:
        server.faults.drop_stream_at("message_part", occurrence=12)
        server.faults.fail_snapshots(times=1, skip=1, message=SUBSCRIBE_FAILED)

    async def scenario(rt: Any) -> Any:
        agent = await quick_agent(rt, server)
        if mode == "stream":
            out: Any = await rt.stream(agent, "say something long")
        else:
            out = await rt.generate(agent, "say something long")
        interrupts = ops(server, "interrupt_chat")
        await rt.close(agent)
        return out, interrupts

    out, interrupts = runtime.run(scenario)
    assert out.text == LONG_TEXT
    if isinstance(out, Streamed):
        assert out.error is None and out.result.text == LONG_TEXT
        assert not out.of("ErrorPart")
    redials = [e for e in runtime.recorder.events if e.type == "ws:redial"]
    assert len(redials) == (1 if where == "first-dial" else 2)
    assert interrupts == 0


@pytest.mark.parametrize("message", [SNAPSHOT_FAILED, SUBSCRIBE_FAILED])
def test_d34_session_errors_past_the_redial_budget_raise_the_servers_message(
    runtime: Any, server: FakeCoderServer, message: str
) -> None:
    """D34: every dial meets the session error: after the fifth, ``generate`` raises a
    ``CoderStreamError`` (not a ``CoderChatError``) that ends with the server's message."""
    server.faults.fail_snapshots(times=None, message=message)

    async def scenario(rt: Any) -> Any:
        agent = await quick_agent(rt, server)
        with pytest.raises(CoderStreamError) as caught:
            await rt.generate(agent, "hello")
        await rt.close(agent, archive=False)
        return caught.value

    error = runtime.run(scenario)
    assert isinstance(error, CoderStreamError)
    assert error.reason == "redial-budget-exhausted"
    assert error.message.endswith(f"the last one ended with the server's stream error: {message}")
    dials = [e for e in runtime.recorder.events if e.type == "ws:dial"]
    assert len(dials) == 5


@pytest.mark.parametrize("occurrence", [3, 20])
def test_c2_a_drop_after_the_tool_pause_heals_on_the_retained_stream(
    runtime: Any, server: FakeCoderServer, occurrence: int
) -> None:
    get_weather, cities = weather_tool()
    server.config.scripts.add(
        "weather",
        Script(
            (
                Say("Checking the weather."),
                CallClientTool(name="get_weather", args={"city": "Bern"}),
                Say(LONG_TEXT, chunk=9),
            ),
            chunk_delay=0.003,
        ),
    )
    # Deltas 1-3 belong to the first step; the 20th is in the middle of the answer.
    server.faults.drop_stream_at("message_part", occurrence=occurrence)

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, tools=[get_weather])
        streamed = await rt.stream(agent, "weather in Bern")
        await rt.close(agent)
        return streamed

    streamed = runtime.run(scenario)
    assert streamed.error is None and cities == ["Bern"]
    assert streamed.text == "Checking the weather." + LONG_TEXT
    assert [s.text for s in streamed.result.steps] == ["Checking the weather.", LONG_TEXT]
    assert ops(server, "submit_tool_results") == 1


def test_g5_a_lost_action_required_is_recovered(runtime: Any, server: FakeCoderServer) -> None:
    get_weather, cities = weather_tool()
    server.faults.drop_stream_at("action_required")

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, tools=[get_weather])
        result = await rt.generate(agent, "What is the weather in Oslo?")
        await rt.close(agent)
        return result

    result = runtime.run(scenario)
    assert cities == ["Oslo"]
    assert result.text == 'get_weather returned {"city":"Oslo","temp_c":21}.'
    assert ops(server, "submit_tool_results") == 1


# -- two turns on one chat (D3, D8, E) -------------------------------------------------------


@pytest.mark.parametrize("stamped", [True, False])
def test_d3_a_queued_prompt_settles_the_running_turn_by_promotion(
    runtime: Any, make_server: MakeServer, stamped: bool
) -> None:
    server = make_server(stamp_promotions=stamped)
    server.config.scripts.add("slow", Script((Say("first part "), Wait(1.0), Say("first done"))))
    server.config.scripts.add("queued", Script((Say("second answer"),)))

    async def scenario(rt: Any) -> Any:
        owner = await rt.agent(server)
        await rt.generate(owner, "hello")
        other = await rt.agent(server, chat_id=owner.chat_id)

        async def queued_turn() -> Any:
            # Sent once the slow turn runs on the server: after a fixed delay, a loaded
            # machine could find it finished already, and nothing would be queued.
            await rt.until(lambda: running(server, owner.chat_id))
            return await rt.generate(other, "queued turn")

        slow, queued = await rt.concurrently(lambda: rt.generate(owner, "slow turn"), queued_turn)
        await rt.close(owner)
        await rt.close(other)
        return slow, queued

    slow, queued = runtime.run(scenario)
    assert isinstance(slow, GenerateResult) and isinstance(queued, GenerateResult)
    # D3: the finishing turn settles when the promoted prompt appears; nothing of the next
    # turn leaks into it, and the queued turn sees only its own output.
    assert slow.settled_by == "promotion" and slow.finish_reason == "stop"
    assert slow.text == "first part first done"
    assert queued.text == "second answer" and queued.settled_by is None


def test_g2_a_second_concurrent_generate_is_refused_at_once(
    runtime: Any, server: FakeCoderServer
) -> None:
    server.config.scripts.add("slow", Script((Wait(0.3), Say("slow done"))))

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        results = await rt.concurrently(
            lambda: rt.generate(agent, "slow"), lambda: rt.generate(agent, "fast")
        )
        await rt.close(agent)
        return results

    slow, refused = runtime.run(scenario)
    assert isinstance(slow, GenerateResult) and slow.text == "slow done"
    assert isinstance(refused, CoderAgentError) and "single-flight" in str(refused)
    assert ops(server, "create_chat") == 1 and ops(server, "create_chat_message") == 0


# -- timeouts, cancellation, cleanup (C.3, D22, H.3-H.5) -----------------------------------


def test_c3_request_timeout_is_retryable_and_interrupts_once(
    runtime: Any, server: FakeCoderServer
) -> None:
    server.config.scripts.add("stuck", Script((Say("thinking"), Wait(30.0))))

    async def scenario(rt: Any) -> Any:
        # The chat exists before the timeout can pass: a creation still unanswered has no
        # chat to interrupt (E.5), which a loaded machine would otherwise hit.
        creator = await rt.agent(server)
        await rt.generate(creator, "hello")
        agent = await rt.agent(server, chat_id=creator.chat_id, request_timeout=0.3)
        try:
            await rt.generate(agent, "stuck")
        except CoderChatError as exc:
            error = exc
        await rt.until(lambda: ops(server, "interrupt_chat") > 0)
        await rt.sleep(0.2)
        interrupts = ops(server, "interrupt_chat")
        await rt.close(agent)
        await rt.close(creator)
        return error, interrupts

    error, interrupts = runtime.run(scenario)
    assert error.kind == "timeout" and error.retryable and error.chat_id
    assert "0.3s request_timeout" in str(error)
    assert interrupts == 1


def test_d22_a_cancelled_turn_interrupts_the_run_and_leaves_no_socket_open(
    runtime: Any, server: FakeCoderServer
) -> None:
    server.config.scripts.add("stuck", Script((Say("thinking"), Wait(30.0))))

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        # The chat exists before the deadline can expire: a creation still in flight has no
        # chat id to interrupt (state machines E.5), which a slow machine would otherwise hit.
        await rt.generate(agent, "hello")
        error = await rt.generate_within(agent, "stuck", 0.3)
        await rt.until(lambda: ops(server, "interrupt_chat") > 0)
        websockets = server.open_websockets
        # The agent stays usable after a cancellation.
        after = await rt.generate(agent, "are you there?")
        await rt.close(agent)
        return error, websockets, after, await rt.idle(server)

    error, websockets, after, idle = runtime.run(scenario)
    assert isinstance(error, runtime.deadline_error)
    assert ops(server, "interrupt_chat") >= 1 and websockets == 0
    assert after.text == "You said: are you there?"
    assert idle and server.open_connections == 0


def test_stream_teardown_interrupts_the_run(runtime: Any, server: FakeCoderServer) -> None:
    server.config.scripts.add("stuck", Script((Say("a few words here"), Wait(30.0))))

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        parts = await rt.stream_first(agent, "stuck", 3)
        await rt.until(lambda: ops(server, "interrupt_chat") > 0)
        await rt.close(agent)
        return parts, await rt.idle(server)

    parts, idle = runtime.run(scenario)
    assert len(parts) == 3 and ops(server, "interrupt_chat") >= 1 and idle


def test_h4_archive_after_an_interrupt_retries_the_409s(
    runtime: Any, make_server: MakeServer
) -> None:
    server = make_server(interrupt_delay=0.3)
    server.config.scripts.add("stuck", Script((Say("working"), Wait(30.0))))

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)

        async def stop_and_archive() -> Any:
            # Once the run is under way: before the chat exists there is nothing to stop.
            await rt.until(lambda: running(server, agent.chat_id))
            interrupted = await rt.interrupt(agent)
            return interrupted, await rt.archive(agent)

        turn, (interrupted, archived) = await rt.concurrently(
            lambda: rt.generate(agent, "stuck"), stop_and_archive
        )
        chat = await rt.client_call(agent, "get_chat", archived.chat_id)
        statuses = [r.status for r in server.counters.request_log if r.op == "update_chat"]
        await rt.close(agent)
        return turn, interrupted, archived, chat, statuses

    turn, interrupted, archived, chat, statuses = runtime.run(scenario)
    assert interrupted.interrupted and interrupted.chat_id == archived.chat_id
    assert isinstance(turn, GenerateResult)
    assert archived.archived and archived.archived_chat_ids == (archived.chat_id,)
    assert chat.archived
    # D10: only 409 (the chat is winding down) is retried, until the archive goes through.
    assert 409 in statuses[:-1] and statuses[-1] < 300


def test_h5_leaving_the_agent_after_a_completed_turn_archives_without_interrupting(
    runtime: Any, server: FakeCoderServer
) -> None:
    """The chat's last status is settled (D1) and no turn is in flight: nothing runs on it,
    so closing sends the archive alone, not an interrupt the server would answer 409."""

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        result = await rt.generate(agent, "hi")
        before = len(server.counters.request_log)
        await rt.close(agent)
        await rt.close(agent)  # idempotent
        on_close = [r.op for r in server.counters.request_log[before:]]
        probe = await rt.agent(server)
        chat = await rt.client_call(probe, "get_chat", result.chat_id)
        await rt.close(probe)
        return chat, on_close, await rt.idle(server)

    chat, on_close, idle = runtime.run(scenario)
    assert chat.archived and idle
    assert on_close == ["update_chat"]
    assert ops(server, "interrupt_chat") == 0


def test_h5_leaving_the_agent_while_a_run_may_be_live_interrupts_then_archives(
    runtime: Any, server: FakeCoderServer
) -> None:
    """A turn left early (the stream block ended after a few parts) saw the chat running
    last: closing interrupts it before the archive, as it does whenever the chat is not known
    to be settled."""
    server.config.scripts.add("stuck", Script((Say("a few words here"), Wait(30.0))))

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        await rt.stream_first(agent, "stuck", 3)
        await rt.until(lambda: ops(server, "interrupt_chat") > 0)
        await rt.sleep(0.2)
        chat_id = agent.chat_id
        before = len(server.counters.request_log)
        await rt.close(agent)
        on_close = [r.op for r in server.counters.request_log[before:]]
        return on_close, server.model.chat(chat_id).archived, await rt.idle(server)

    on_close, archived, idle = runtime.run(scenario)
    assert on_close[0] == "interrupt_chat"
    assert set(on_close[1:]) == {"update_chat"}, on_close
    assert archived and idle


#: A close must end by its ``settle_deadline`` plus this allowance (socket teardown, a loaded
#: machine): far under what requests sent one after the other would take.
CLOSE_ALLOWANCE = 2.5


def test_h5_closing_ends_by_the_settle_deadline_when_every_answer_is_slow(
    runtime: Any, server: FakeCoderServer
) -> None:
    """The server takes 3 s to answer the interrupt and the archive: with a 2 s
    ``settle_deadline`` the close returns by then (plus an allowance), where sending them one
    after the other would take over 6 s. Both were attempted (the turn was left early, so the
    chat is not known to be settled); the close raises nothing."""
    server.config.scripts.add("stuck", Script((Say("a few words here"), Wait(30.0))))

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, settle_deadline=2.0)
        await rt.stream_first(agent, "stuck", 3)
        await rt.until(lambda: ops(server, "interrupt_chat") > 0)
        await rt.sleep(0.2)
        interrupts = ops(server, "interrupt_chat")
        server.faults.delay_requests("interrupt_chat", 3.0)
        server.faults.delay_requests("archive_chat", 3.0)
        start = time.monotonic()
        await rt.close(agent)
        return time.monotonic() - start, ops(server, "interrupt_chat") - interrupts

    elapsed, interrupts = runtime.run(scenario)
    assert elapsed < 2.0 + CLOSE_ALLOWANCE, f"closing took {elapsed:.1f} s"
    assert interrupts == 1


def test_h5_the_archive_409_retries_of_a_close_stay_within_the_settle_deadline(
    runtime: Any, make_server: MakeServer
) -> None:
    """The interrupted run winds down for 30 s, so every archive answers 409, each after
    0.8 s: the close retries them (D10) and still returns by its 2 s ``settle_deadline``."""
    server = make_server(interrupt_delay=30.0)
    server.config.scripts.add("stuck", Script((Say("working"), Wait(60.0))))

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, settle_deadline=2.0)
        error = await rt.within(1.0, "generate", agent, "stuck")
        await rt.until(lambda: ops(server, "interrupt_chat") > 0)
        server.faults.delay_requests("archive_chat", 0.8)
        start = time.monotonic()
        await rt.close(agent)
        return error, time.monotonic() - start

    error, elapsed = runtime.run(scenario)
    assert isinstance(error, runtime.deadline_error)
    assert elapsed < 2.0 + CLOSE_ALLOWANCE, f"closing took {elapsed:.1f} s"
    archives = [r.status for r in server.counters.request_log if r.op == "update_chat"]
    assert len(archives) >= 2 and set(archives) == {409}, archives


def test_closing_without_archiving_keeps_the_chat_for_a_later_step(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        first = await rt.generate(agent, "step one")
        await rt.close(agent, archive=False)
        idle = await rt.idle(server)
        later = await rt.agent(
            server, chat_id=first.chat_id, last_seen_message_id=first.last_seen_message_id
        )
        second = await rt.generate(later, "step two")
        archives_before = ops(server, "update_chat")
        await rt.close(later)
        return first, idle, second, archives_before

    first, idle, second, archives_before = runtime.run(scenario)
    assert idle and archives_before == 0
    # Each close follows a completed turn: the chat is known to be settled, nothing to stop.
    assert ops(server, "interrupt_chat") == 0
    assert second.chat_id == first.chat_id and second.text == "You said: step two"


def test_c5_a_fresh_chat_that_lost_its_stream_is_stranded_and_archived_later(
    runtime: Any, make_server: MakeServer
) -> None:
    # Without episode coordinates a drop mid-text cannot be healed (B.2): a CoderStreamError.
    server = make_server(coordinates=False)
    server.config.scripts.add("long", Script((Say(LONG_TEXT, chunk=5),), chunk_delay=0.003))

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        server.faults.drop_stream_after_frames(4)
        try:
            await rt.generate(agent, "long")
        except CoderStreamError as exc:
            error = exc
        state = (agent.chat_id, agent.last_known_chat_id, agent.stranded_chat_ids)
        retrying = await rt.agent(server, max_retries=1)
        server.faults.drop_stream_after_frames(4)
        retried = await rt.generate(retrying, "long")
        retried_state = retrying.stranded_chat_ids
        archived = await rt.archive(agent)
        archived_retrying = await rt.archive(retrying)
        await rt.close(agent)
        await rt.close(retrying)
        return error, state, retried, retried_state, archived, archived_retrying, agent

    error, state, retried, retried_state, archived, archived2, agent = runtime.run(scenario)
    assert error.retryable and error.chat_id
    assert state == (None, error.chat_id, (error.chat_id,))
    # max_retries replays the turn on a fresh chat (C.5); the dead one is on the ledger.
    assert retried.text == LONG_TEXT and len(retried_state) == 1
    assert retried.chat_id not in retried_state
    assert archived.archived and archived.archived_chat_ids == (error.chat_id,)
    assert archived2.archived_chat_ids == (*retried_state, retried.chat_id)
    assert agent.stranded_chat_ids == ()


# -- servers and errors (wire 1.4, 10) -------------------------------------------------------


def test_wire1_4_a_legacy_only_server_is_used_through_the_experimental_prefix(
    runtime: Any, make_server: MakeServer
) -> None:
    server = make_server(legacy_only=True)
    get_weather, cities = weather_tool()

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, tools=[get_weather])
        result = await rt.generate(agent, "What is the weather in Lima?")
        models = await rt.list_models(agent)
        await rt.close(agent)
        return result, models

    result, models = runtime.run(scenario)
    assert cities == ["Lima"]
    assert result.text == 'get_weather returned {"city":"Lima","temp_c":21}.'
    assert models and all(isinstance(m.model, str) for m in models)
    paths = [r.path for r in server.counters.request_log if r.status < 400]
    assert paths and all("/api/v2/chats" not in p for p in paths)


def test_wire10_a_bad_token_is_a_401_api_error(runtime: Any, server: FakeCoderServer) -> None:
    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, token="not-the-token")
        try:
            await rt.generate(agent, "hi")
        except CoderApiError as exc:
            error = exc
        await rt.close(agent)
        return error

    error = runtime.run(scenario)
    assert error.status == 401 and not error.retryable


def test_wire10_an_unknown_chat_is_a_404_api_error(runtime: Any, server: FakeCoderServer) -> None:
    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, chat_id="00000000-0000-4000-8000-000000000000")
        try:
            await rt.generate(agent, "hi")
        except CoderApiError as exc:
            error = exc
        await rt.close(agent)
        return error

    error = runtime.run(scenario)
    assert error.status == 404


def test_d2_a_failed_run_raises_in_generate_and_is_an_error_part_in_a_stream(
    runtime: Any, server: FakeCoderServer
) -> None:
    server.config.scripts.add(
        "fail", Script((Fail(message="provider exploded", kind="overloaded", retryable=True),))
    )

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        try:
            await rt.generate(agent, "fail now")
        except CoderChatError as exc:
            error = exc
        streamed = await rt.stream(agent, "fail again")
        await rt.close(agent)
        return error, streamed

    error, streamed = runtime.run(scenario)
    assert error.kind == "overloaded" and error.retryable and "provider exploded" in str(error)
    (part,) = streamed.of("ErrorPart")
    assert isinstance(part, ErrorPart)
    finish = streamed.of("Finish")[-1]
    assert isinstance(finish, Finish) and finish.finish_reason == "error"
    assert streamed.error is None and streamed.result.finish_reason == "error"
    assert streamed.result.error is not None and streamed.result.error.kind == "overloaded"


# -- files (wire 7) --------------------------------------------------------------------------


def test_wire7_attachments_upload_transparently_and_attach_reuses_an_upload(
    runtime: Any, server: FakeCoderServer, tmp_path: pathlib.Path
) -> None:
    report = tmp_path / "report.md"
    report.write_bytes(b"# Q3\nAll good.")

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        inline = await rt.generate(
            agent, ["Summarize this.", Attachment(content=b"a,b\n1,2", filename="data.csv")]
        )
        attached = await rt.attach(agent, report)
        uploads_after_attach = ops(server, "upload_chat_file")
        await rt.generate(agent, ["List the risks.", attached])
        await rt.generate(agent, [{"type": "text", "text": "Again."}, attached.to_file_part()])
        downloaded = await rt.client_call(agent, "get_chat_file", attached.file_id)
        try:
            await rt.generate(
                agent, ["zip", Attachment(content=b"PK", media_type="application/zip")]
            )
        except CoderAgentError as exc:
            refused = exc
        await rt.close(agent)
        return inline, attached, uploads_after_attach, downloaded, refused

    inline, attached, uploads_after_attach, downloaded, refused = runtime.run(scenario)
    assert inline.text == "You said: Summarize this."
    assert isinstance(attached, AttachedFile)
    assert (attached.media_type, attached.filename) == ("text/markdown", "report.md")
    assert uploads_after_attach == 2 and ops(server, "upload_chat_file") == 2
    assert downloaded.data == b"# Q3\nAll good." and downloaded.media_type == "text/markdown"
    assert "not allowed" in str(refused)


# -- structured output (docs/agents.md "Structured output" rules 1-4) -------------------------


@attrs.frozen
class Triage:
    severity: Literal["critical", "major", "minor"]
    summary: str


def test_structured_output_is_filed_through_the_tool_and_validated(
    runtime: Any, server: FakeCoderServer
) -> None:
    server.config.scripts.add(
        "triage",
        Script(
            (
                CallClientTool(name="structured_output", args={"severity": "loud", "summary": "x"}),
                CallClientTool(
                    name="structured_output", args={"severity": "major", "summary": "disk full"}
                ),
                Say("Filed."),
            )
        ),
    )

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, output_type=Triage)
        result = await rt.generate(agent, "triage the incident")
        await rt.close(agent)
        return result

    result = runtime.run(scenario)
    assert result.output == Triage("major", "disk full") and result.text == "Filed."
    (first, second) = result.steps[0].tool_results
    assert first.is_error and "invalid input" in first.result
    assert not second.is_error
    assert ops(server, "create_chat_message") == 0  # no nudge was needed


def test_structured_output_nudges_an_idle_chat_once(runtime: Any, server: FakeCoderServer) -> None:
    filing = Script(
        (
            CallClientTool(name="structured_output", args={"severity": "minor", "summary": "typo"}),
            Say("Done."),
        )
    )
    prose = Script((Say("It is a minor typo."),))

    async def scenario(rt: Any) -> Any:
        server.config.scripts = ScriptBook(default=prose)
        server.config.scripts.add("structured_output tool now", filing)
        agent = await rt.agent(server, output_type=Triage)
        result = await rt.generate(agent, "answer in prose")
        server.config.scripts = ScriptBook(default=prose)
        stubborn = await rt.agent(server, output_type=Triage)
        try:
            await rt.generate(stubborn, "prose only")
        except StructuredOutputError as exc:
            error = exc
        await rt.close(agent)
        await rt.close(stubborn)
        return result, error

    result, error = runtime.run(scenario)
    assert result.output == Triage("minor", "typo") and result.text == "Done."
    assert result.steps[0].text == "It is a minor typo."
    assert error.chat_id and "after one nudge" in str(error)
    # Rule 3: exactly one nudge per call, and never a second one.
    assert ops(server, "create_chat_message") == 2


# -- plain operations ------------------------------------------------------------------------


class WorkspaceFiles:
    def __init__(self, workspace_id: str) -> None:
        self.workspace_id = workspace_id
        self.files: dict[str, bytes] = {}

    def write_file(self, path: str, data: bytes) -> str:
        self.files[path] = data
        return f"/home/coder/{path}"


def test_models_cost_and_workspace_files(
    runtime: Any, server: FakeCoderServer, tmp_path: pathlib.Path
) -> None:
    blob = tmp_path / "assets.zip"
    blob.write_bytes(b"PK" + b"\x00" * (11 * 1024 * 1024))
    files = WorkspaceFiles("ws-1")

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, workspace_id="ws-1", workspace_files=files)
        models = await rt.list_models(agent)
        upload = await rt.upload_to_workspace(agent, blob, "assets.zip")
        small = await rt.upload_to_workspace(agent, b"hello", "notes/hello.txt")
        try:
            await rt.get_chat_cost(agent)
        except CoderAgentError as exc:
            no_chat = exc
        await rt.close(agent)
        return models, upload, small, no_chat

    models, upload, small, no_chat = runtime.run(scenario)
    assert {m.model for m in models} >= {"claude-sonnet-4-6", "gpt-5"}
    # Workspace files are written as-is: no allowlist, no 10 MiB cap.
    assert (upload.path, upload.size) == ("/home/coder/assets.zip", 11 * 1024 * 1024 + 2)
    assert files.files["notes/hello.txt"] == b"hello" and small.size == 5
    assert "no chat" in str(no_chat)


def test_get_chat_cost_is_a_plain_operation(runtime: Any, server: FakeCoderServer) -> None:
    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        await rt.generate(agent, "hi")
        calls_before = ops(server, "get_chat_cost")
        cost = await rt.get_chat_cost(agent)
        await rt.close(agent)
        return calls_before, cost

    calls_before, cost = runtime.run(scenario)
    # D17: never called implicitly by a turn.
    assert calls_before == 0 and ops(server, "get_chat_cost") == 1
    assert cost is not None


def test_transport_events_cover_http_ws_and_segments(runtime: Any, server: FakeCoderServer) -> None:
    server.config.scripts.add("hello", Script((Say(LONG_TEXT),), chunk_delay=0.005))

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        deltas, result = await rt.stream_text(agent, "hello")
        await rt.close(agent)
        return deltas, result

    deltas, result = runtime.run(scenario)
    assert "".join(deltas) == result.text and len(deltas) > 1
    kinds = {e.type for e in runtime.recorder.events}
    assert {"http:request", "http:response", "ws:dial", "ws:open", "segment:start"} <= kinds
    settles = [e for e in runtime.recorder.events if e.type == "segment:settle"]
    assert len(settles) == 1 and settles[0].finish_reason == "stop"
    assert all(isinstance(d, str) for d in deltas)


def test_a_supplied_client_gets_the_http_and_ws_events_and_the_agent_the_segments(
    runtime: Any, server: FakeCoderServer
) -> None:
    client_events: list[Any] = []
    agent_events: list[Any] = []

    async def scenario(rt: Any) -> Any:
        client = await rt.client(server, on_transport_event=client_events.append)
        try:
            await rt.agent(server, client=client, base_url=server.url)
        except CoderAgentError as exc:
            conflict = exc
        agent = await rt.agent(
            server,
            client=client,
            base_url=None,
            token=None,
            on_transport_event=agent_events.append,
        )
        result = await rt.generate(agent, "hi")
        await rt.close(agent)
        # The agent never closes a client it was given.
        models = await rt.client_call(agent, "list_model_configs", server.organization_id)
        await rt.close_client(client)
        return conflict, result, models

    conflict, result, models = runtime.run(scenario)
    assert "either client or base_url" in str(conflict)
    assert result.text.startswith("Hello!") and models
    assert {e.type.split(":")[0] for e in agent_events} == {"segment"}
    client_kinds = {e.type.split(":")[0] for e in client_events}
    assert client_kinds == {"http", "ws"}
    runtime.recorder.events.extend(client_events + agent_events)


def test_a_shared_client_keeps_no_state_of_closed_agents(
    runtime: Any, server: FakeCoderServer
) -> None:
    # A long-lived client shared by many short-lived agents: each closed agent's session is
    # released, so the client's driver holds nothing per agent afterwards.
    async def scenario(rt: Any) -> tuple[list[int], int, int]:
        client = await rt.client(server)
        held: list[int] = []
        for index in range(50):
            agent = await rt.agent(server, client=client, base_url=None, token=None)
            await rt.generate(agent, f"hi {index}")
            held.append(client.driver.attached_sessions)
            await rt.close(agent, archive=index % 2 == 0)
        after = client.driver.attached_sessions
        connections = client.driver.open_connections
        await rt.close_client(client)
        return held, after, connections

    held, after, connections = runtime.run(scenario)
    assert held == [1] * 50
    assert (after, connections) == (0, 0)


def test_attaching_a_file_type_the_server_does_not_accept_says_so_wire_7(
    runtime: Any, server: FakeCoderServer, tmp_path: pathlib.Path
) -> None:
    archive = tmp_path / "logs.zip"
    archive.write_bytes(b"PK\x03\x04")

    async def scenario(rt: Any) -> CoderAgentError:
        agent = await rt.agent(server)
        try:
            with pytest.raises(CoderAgentError) as refused:
                await rt.attach(agent, archive)
        finally:
            await rt.close(agent)
        return refused.value

    message = str(runtime.run(scenario))
    assert message.startswith('File type ".zip" of "logs.zip" is not accepted'), message
    assert ".pdf" in message and "media type" not in message
    assert server.counters.requests["upload_chat_file"] == 0


def test_on_chat_created_sees_the_id_before_the_stream_opens_and_cannot_break_the_turn(
    runtime: Any, server: FakeCoderServer, caplog: pytest.LogCaptureFixture
) -> None:
    seen: list[tuple[str, int]] = []

    def created(chat_id: str) -> None:
        # What the server had been asked by then: the stream is not dialled yet.
        seen.append((chat_id, ops(server, "stream_chat")))
        raise RuntimeError("the hook failed")

    async def scenario(rt: Any) -> None:
        agent = await rt.agent(server, on_chat_created=created)
        result = await rt.generate(agent, "hello")
        assert result.text
        assert seen == [(agent.chat_id, 0)]
        # A second turn reuses the chat: the hook is not called again.
        await rt.generate(agent, "again")
        assert len(seen) == 1
        await rt.close(agent)

    runtime.run(scenario)
    assert any("on_chat_created raised" in r.getMessage() for r in caplog.records)
