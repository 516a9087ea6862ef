"""What the library logs (docs/logging.md), on every runtime against the fake server over
loopback: a stream that redials says so at WARNING with its count (n/5), a stream given up on
says so at WARNING, a client tool that raises is a WARNING with its traceback, a watch that
redials is a WARNING; a normal turn and close log nothing at WARNING, and below WARNING only
the one line saying which chat prefix the client locked. No record ever holds the token (the
``make_server`` fixture checks every record of every test too)."""

from __future__ import annotations

import logging
import re
import traceback
from typing import Any

import attrs
import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto import CoderStreamError
from coder_proto._stream.reader import BackoffPolicy
from coder_proto.fake import CallClientTool, Say, Script

from .test_watch import FAST, watch_a_chat_once_connected

LONG_TEXT = " ".join(f"word{i}" for i in range(40))
#: Redials at once (the default schedule sleeps 1 + 2 + 4 + 8 s before giving up).
QUICK = BackoffPolicy(initial=0.01, multiplier=1.0, cap=0.01)


def library_records(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The records of the library's own loggers (``coder_proto``, ``coder_io_*``), not the
    fake server's or httpx's."""
    return [
        r
        for r in caplog.records
        if (r.name == "coder_proto" or r.name.startswith(("coder_proto.", "coder_io_")))
        and not r.name.startswith("coder_integrations.fake_server")
    ]


def rendered(record: logging.LogRecord) -> str:
    text = record.getMessage()
    if record.exc_info:
        text += "".join(traceback.format_exception(*record.exc_info))
    return text


def assert_no_token(caplog: pytest.LogCaptureFixture, server: FakeCoderServer) -> None:
    texts = [rendered(r) for r in caplog.records]
    assert texts
    assert not [t for t in texts if server.token in t]


async def quick_agent(rt: Any, server: FakeCoderServer, **kwargs: Any) -> Any:
    agent = await rt.agent(server, **kwargs)
    session = agent._core.session
    session.config = attrs.evolve(session.config, backoff=QUICK)
    return agent


def test_a_normal_turn_and_close_log_nothing_but_the_prefix_lock(
    runtime: Any, server: FakeCoderServer, caplog: pytest.LogCaptureFixture
) -> None:
    """A turn with a client-tool round trip, then ``close``: nothing at WARNING or above from
    the library, and below it exactly one DEBUG line (the chat prefix the client locked,
    once per client); in particular the idle chat's 409 to the closing interrupt is not
    logged."""
    caplog.set_level(logging.DEBUG)
    server.config.scripts.add(
        "weather", Script((CallClientTool(name="get_weather", args={"city": "Oslo"}), Say("ok")))
    )

    def get_weather(city: str) -> dict[str, Any]:
        return {"city": city, "temp_c": 21}

    async def scenario(rt: Any) -> None:
        agent = await rt.agent(server, tools=[get_weather])
        result = await rt.generate(agent, "weather please")
        assert result.text == "ok"
        await rt.generate(agent, "and now?")
        await rt.close(agent)

    runtime.run(scenario)
    records = library_records(caplog)
    assert [(r.levelno, r.getMessage()) for r in records] == [
        (logging.DEBUG, "chat route prefix locked to /api/v2/chats")
    ]
    assert_no_token(caplog, server)


def test_a_redial_is_a_warning_naming_the_count(
    runtime: Any, server: FakeCoderServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.config.scripts.add("long", Script((Say(LONG_TEXT, chunk=7),), chunk_delay=0.002))
    server.faults.drop_stream_after_frames(3)

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        try:
            return await rt.generate(agent, "say something long")
        finally:
            await rt.close(agent)

    result = runtime.run(scenario)
    assert result.text == LONG_TEXT
    warnings = [r for r in library_records(caplog) if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    (redial,) = warnings
    assert (redial.name, redial.levelno) == ("coder_proto", logging.WARNING)
    message = redial.getMessage()
    assert result.chat_id in message
    assert "redialing in 1.0 s (1/5 failures in a row)" in message
    assert_no_token(caplog, server)


def test_d34_a_stream_session_error_is_one_redial_warning_with_the_servers_message(
    runtime: Any, server: FakeCoderServer, caplog: pytest.LogCaptureFixture
) -> None:
    """The server could not set up the stream session: the one WARNING is the redial line,
    and it carries the server's message; nothing says the turn failed."""
    caplog.set_level(logging.DEBUG)
    server.faults.fail_snapshots(times=1)

    async def scenario(rt: Any) -> Any:
        agent = await quick_agent(rt, server)
        try:
            return await rt.generate(agent, "hello")
        finally:
            await rt.close(agent)

    result = runtime.run(scenario)
    assert result.text
    warnings = [r for r in library_records(caplog) if r.levelno >= logging.WARNING]
    assert [r.getMessage() for r in warnings] == [
        f"chat {result.chat_id}: the stream connection ended (chat stream closed by the server "
        "(code 1000) after a stream session error: failed to load initial snapshot); "
        "redialing in 0.0 s (1/5 failures in a row)"
    ]
    assert_no_token(caplog, server)


def test_giving_up_on_the_stream_is_a_warning(
    runtime: Any, server: FakeCoderServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.faults.reject_upgrades(503, times=None)

    async def scenario(rt: Any) -> BaseException:
        agent = await quick_agent(rt, server)
        try:
            with pytest.raises(CoderStreamError) as raised:
                await rt.generate(agent, "hi")
            return raised.value
        finally:
            server.faults.clear()
            await rt.close(agent)

    error = runtime.run(scenario)
    assert error.reason == "redial-budget-exhausted"
    warnings = [r.getMessage() for r in library_records(caplog) if r.levelno >= logging.WARNING]
    redials = [m for m in warnings if "redialing" in m]
    assert [re.search(r"\((\d)/5 failures in a row\)", m).group(1) for m in redials] == list(  # type: ignore[union-attr]
        "1234"
    )
    give_ups = [m for m in warnings if "giving up" in m]
    assert len(give_ups) == 1
    assert "503" in give_ups[0] and "after 5/5 failures in a row" in give_ups[0]
    assert error.chat_id is not None and error.chat_id in give_ups[0]
    assert_no_token(caplog, server)


def test_a_raising_client_tool_is_a_warning_with_its_traceback(
    runtime: Any, server: FakeCoderServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.config.scripts.add(
        "explode",
        Script((CallClientTool(name="explode", args={"reason": "comply"}), Say("{tool_results}"))),
    )

    def explode(reason: str) -> str:
        raise RuntimeError(f"cannot {reason}")

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, tools=[explode])
        try:
            return await rt.generate(agent, "explode please")
        finally:
            await rt.close(agent)

    result = runtime.run(scenario)
    assert "cannot comply" in result.text
    warnings = [r for r in library_records(caplog) if r.levelno >= logging.WARNING]
    assert len(warnings) == 1
    (record,) = warnings
    assert record.name == "coder_proto" and record.levelno == logging.WARNING
    assert "client tool 'explode' raised RuntimeError" in record.getMessage()
    assert record.exc_info is not None and isinstance(record.exc_info[1], RuntimeError)
    text = rendered(record)
    assert "Traceback" in text and "in explode" in text and "cannot comply" in text
    assert_no_token(caplog, server)


def test_a_watch_that_redials_is_a_warning(
    runtime: Any, server: FakeCoderServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    server.faults.drop_stream_after_frames(0, times=2, route="watch")

    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        watch = await rt.enter(client.watch_chats(backoff=FAST))
        await watch_a_chat_once_connected(rt, server, client, watch, dials=3)
        await rt.leave(watch)
        await rt.close_client(client)

    runtime.run(scenario)
    warnings = [r.getMessage() for r in library_records(caplog) if r.levelno >= logging.WARNING]
    assert len(warnings) == 2
    assert all("the chat watch connection ended" in m and "redialing in" in m for m in warnings)
    assert_no_token(caplog, server)


def test_a_normal_watch_logs_nothing_but_the_prefix_lock(
    runtime: Any, server: FakeCoderServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)

    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        watch = await rt.enter(client.watch_chats(backoff=FAST))
        await watch_a_chat_once_connected(rt, server, client, watch, dials=1)
        await rt.leave(watch)
        await rt.close_client(client)

    runtime.run(scenario)
    assert [(r.levelno, r.getMessage()) for r in library_records(caplog)] == [
        (logging.DEBUG, "chat route prefix locked to /api/v2/chats")
    ]
    assert_no_token(caplog, server)
