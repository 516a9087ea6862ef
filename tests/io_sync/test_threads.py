"""What the blocking adapter promises about threads (``coder_io_sync`` module docstring):
``interrupt()`` from another thread stops a running ``generate``; a ``CoderChatClient`` is
shared by threads that each perform their own requests; agents in several threads share one
client; tools run in threads of their own while the calling thread reads the stream; nothing
is left running once the agent is closed."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_io_sync import CoderAgent, CoderAgentError, CoderChatClient, GenerateResult, tool
from coder_proto.fake import CallClientTool, Say, Script, Wait


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.001, interrupt_delay=0.02) as fake:
        fake.config.scripts.add("stuck", Script((Say("thinking"), Wait(30.0))))
        yield fake
        assert fake.wait_idle(5.0)


def agent_for(server: FakeCoderServer, **kwargs: Any) -> CoderAgent:
    if "client" not in kwargs:
        kwargs.setdefault("base_url", server.url)
        kwargs.setdefault("token", server.token)
    kwargs.setdefault("organization_id", server.organization_id)
    kwargs.setdefault("settle_retry_delay", 0.05)
    return CoderAgent(**kwargs)


def in_threads(*bodies: Callable[[], Any]) -> list[Any]:
    """Run each body in a thread of its own; the values or exceptions, in order."""
    results: list[Any] = [None] * len(bodies)

    def run(index: int, body: Callable[[], Any]) -> None:
        try:
            results[index] = body()
        except BaseException as exc:
            results[index] = exc

    threads = [threading.Thread(target=run, args=(i, b)) for i, b in enumerate(bodies)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60.0)
        assert not thread.is_alive()
    return results


def sync_threads() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("coder-io-sync") and t.is_alive()}


def test_interrupt_from_another_thread_stops_a_running_generate_h3(
    server: FakeCoderServer,
) -> None:
    with agent_for(server) as agent:

        def stop_soon() -> Any:
            time.sleep(0.4)
            return agent.interrupt()

        started = time.monotonic()
        result, interrupted = in_threads(lambda: agent.generate("stuck"), stop_soon)
        assert isinstance(result, GenerateResult) and result.text == "thinking"
        assert time.monotonic() - started < 5.0
        assert interrupted.interrupted and interrupted.chat_id == result.chat_id
        assert server.counters.requests["interrupt_chat"] == 1
        # The agent goes on.
        assert agent.generate("are you there?").text == "You said: are you there?"


def test_a_second_generate_from_another_thread_is_refused_at_once_g2(
    server: FakeCoderServer,
) -> None:
    with agent_for(server) as agent:

        def second() -> Any:
            time.sleep(0.3)
            try:
                return agent.generate("second")
            finally:
                agent.interrupt()

        first, refused = in_threads(lambda: agent.generate("stuck"), second)
        assert isinstance(first, GenerateResult)
        assert isinstance(refused, CoderAgentError) and "single-flight" in str(refused)


def test_a_client_shared_by_threads_serves_each_threads_requests(
    server: FakeCoderServer,
) -> None:
    events: list[Any] = []
    with CoderChatClient(server.url, server.token, on_transport_event=events.append) as client:

        def work(n: int) -> str:
            chat = client.create_chat(organization_id=server.organization_id, content=f"hi {n}")
            assert client.get_chat(chat.id).id == chat.id
            client.list_chats()
            return chat.id

        chat_ids = in_threads(*[lambda n=n: work(n) for n in range(8)])
    assert all(isinstance(c, str) for c in chat_ids) and len(set(chat_ids)) == 8
    # One http:* id counter per client, whatever the thread (wire 11).
    ids = [e.id for e in events if e.type == "http:request"]
    assert sorted(ids) == list(range(1, len(ids) + 1)) and len(ids) == 24


def test_agents_in_several_threads_share_one_client_and_stream_at_once(
    server: FakeCoderServer,
) -> None:
    server.config.scripts.add(
        "weather",
        Script(
            (
                CallClientTool(name="get_weather", args={"city": "Oslo"}),
                Say("It is {tool_result} " + " ".join(f"w{i}" for i in range(30))),
            ),
            chunk_delay=0.002,
        ),
    )
    tool_threads: list[str] = []

    @tool
    def get_weather(city: str) -> str:
        """The weather."""
        tool_threads.append(threading.current_thread().name)
        time.sleep(0.05)
        return "sunny"

    with CoderChatClient(server.url, server.token) as client:

        def one(n: int) -> tuple[str, str | None]:
            with agent_for(server, client=client, tools=[get_weather]) as agent:
                if n % 2:
                    with agent.stream(f"weather {n}") as stream:
                        text = "".join(stream.text_stream)
                else:
                    text = agent.generate(f"weather {n}").text
                return text, agent.chat_id

        results = in_threads(*[lambda n=n: one(n) for n in range(6)])
        assert client.driver.open_connections == 0
    for result in results:
        assert not isinstance(result, BaseException), result
    assert all(text.startswith('It is "sunny" w0') for text, _chat in results)
    assert len({chat for _text, chat in results}) == 6
    assert len(tool_threads) == 6
    assert not any(name == "MainThread" for name in tool_threads)


def test_tools_of_one_pause_run_concurrently_in_threads_d5(server: FakeCoderServer) -> None:
    server.config.scripts.add(
        "both",
        Script(
            (
                CallClientTool(name="left", args={}),
                CallClientTool(name="right", args={}),
                Say("{tool_results}"),
            )
        ),
    )
    barrier = threading.Barrier(2, timeout=5.0)

    def left() -> str:
        barrier.wait()  # only passes when both tools run at the same time
        return "L"

    def right() -> str:
        barrier.wait()
        return "R"

    with agent_for(server, tools=[left, right]) as agent:
        result = agent.generate("both please")
    outcomes = {r.tool_name: r for r in result.steps[0].tool_results}
    assert outcomes["left"].result == "L" and outcomes["right"].result == "R"
    assert server.counters.requests["submit_tool_results"] == 1


def test_an_async_tool_gets_an_error_result_d5(server: FakeCoderServer) -> None:
    server.config.scripts.add(
        "fetch", Script((CallClientTool(name="fetch", args={}), Say("{tool_result}")))
    )

    async def fetch() -> str:
        return "never"

    def awaitable() -> Any:
        return fetch()

    server.config.scripts.add(
        "lazy", Script((CallClientTool(name="awaitable", args={}), Say("{tool_result}")))
    )
    with agent_for(server, tools=[fetch, awaitable]) as agent:
        first = agent.generate("fetch it")
        second = agent.generate("lazy one")
    (outcome,) = first.steps[0].tool_results
    assert outcome.is_error and "coroutine function" in outcome.result
    (outcome,) = second.steps[0].tool_results
    assert outcome.is_error and "returned an awaitable" in outcome.result


def test_closing_an_agent_leaves_no_thread_and_no_socket(server: FakeCoderServer) -> None:
    before = sync_threads()
    agent = agent_for(server)
    with pytest.raises(TimeoutError):
        agent.generate("stuck", timeout=0.3)
    agent.close()
    assert agent.client.driver.closed and not agent.client.driver.worker_alive
    assert sync_threads() <= before
    assert server.wait_idle(5.0)
    assert server.counters.requests["interrupt_chat"] >= 1
