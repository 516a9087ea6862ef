"""The runtime's own cancellation at every phase of a turn, on every runtime (D22; state
machines C.3, H.3, H.4), with streams deliberately stuck at each phase.

Each scenario gets a turn (or an archive) stuck at one phase, cancels it with the runtime's
idiom (``rt.within``: ``asyncio.timeout``, ``trio.fail_after``, the blocking ``timeout=``),
then checks what a user relies on: the runtime's deadline error surfaced (never wrapped), the
server run was interrupted exactly once, no stream socket is left open on the server, the
agent works again afterwards, and closing it leaves the server with no connection at all.

A scenario with a fixed deadline first creates its chat with a turn of its own: a deadline that
expires while the creation is still unanswered leaves no chat id to interrupt (state machines
E.5), which a loaded machine would otherwise hit. That case has its own test.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_io_asyncio import GenerateResult
from coder_proto.fake import CallClientTool, Say, Script, Wait

from .conftest import MakeServer

STUCK = Script((Say("thinking"), Wait(30.0)))


def ops(server: FakeCoderServer, op: str) -> int:
    return int(server.counters.requests[op])


async def settled(rt: Any, server: FakeCoderServer) -> int:
    """The interrupts the server got once the background interrupt had time to land."""
    await rt.until(lambda: ops(server, "interrupt_chat") > 0)
    await rt.until(lambda: server.open_websockets == 0)
    await rt.sleep(0.3)
    return ops(server, "interrupt_chat")


async def follow_up_and_close(rt: Any, server: FakeCoderServer, agent: Any) -> Any:
    after = await rt.generate(agent, "are you there?")
    await rt.close(agent)
    return after, await rt.idle(server)


def check(runtime: Any, outcome: Any, *, posts: int = 1, cancelled: bool = False) -> None:
    """``posts`` interrupt requests stop the run once: one, or two when the chat was paused
    in ``requires_action`` (D4's follow-up). The caller saw its runtime's deadline error, or
    with ``cancelled`` its runtime's own cancellation, unwrapped (D22)."""
    error, interrupts, after, idle = outcome
    assert isinstance(error, runtime.cancel_error if cancelled else runtime.deadline_error)
    assert interrupts == posts
    assert isinstance(after, GenerateResult) and after.text == "You said: are you there?"
    assert idle


class UpgradeHole:
    """A loopback relay in front of the fake server: REST passes through, but a WebSocket
    upgrade is swallowed (the socket connects and is never answered) while ``hold``."""

    def __init__(self, target: FakeCoderServer) -> None:
        self.target = target
        self.hold = True
        self.held: list[socket.socket] = []
        self._listener = socket.create_server(("127.0.0.1", 0))
        self._stop = False
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._listener.getsockname()[1]}"

    def open_held(self) -> int:
        """Swallowed sockets the client has not closed yet."""
        alive = 0
        for sock in self.held:
            with contextlib.suppress(OSError):
                sock.setblocking(False)
                try:
                    if sock.recv(1, socket.MSG_PEEK) != b"":
                        alive += 1
                except BlockingIOError:
                    alive += 1
        return alive

    def close(self) -> None:
        self._stop = True
        self._listener.close()
        for sock in self.held:
            sock.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _serve(self, client: socket.socket) -> None:
        first = client.recv(65536)
        if self.hold and b"upgrade: websocket" in first.lower():
            self.held.append(client)
            return
        upstream = socket.create_connection((self.target.host, self.target.port))
        upstream.sendall(first)

        def pipe(src: socket.socket, dst: socket.socket) -> None:
            with contextlib.suppress(OSError):
                while data := src.recv(65536):
                    dst.sendall(data)
            with contextlib.suppress(OSError):
                dst.shutdown(socket.SHUT_WR)

        threading.Thread(target=pipe, args=(upstream, client), daemon=True).start()
        pipe(client, upstream)


@pytest.fixture
def hole(server: FakeCoderServer) -> Iterator[UpgradeHole]:
    relay = UpgradeHole(server)
    yield relay
    relay.close()


def test_d22_cancelled_while_the_stream_socket_connects(
    runtime: Any, server: FakeCoderServer, hole: UpgradeHole
) -> None:
    server.config.scripts.add("stuck", STUCK)

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, base_url=hole.url)
        # The first turn's stream socket goes through; the stuck turn's is swallowed.
        hole.hold = False
        await rt.generate(agent, "hello")
        hole.hold = True
        error = await rt.within(0.5, "generate", agent, "stuck")
        assert hole.held, "the deadline expired before the stream socket connected"
        await rt.until(lambda: ops(server, "interrupt_chat") > 0)
        await rt.until(lambda: hole.open_held() == 0)
        await rt.sleep(0.3)
        interrupts = ops(server, "interrupt_chat")
        hole.hold = False
        return (error, interrupts, *await follow_up_and_close(rt, server, agent))

    check(runtime, runtime.run(scenario))


def test_d22_e5_cancelled_while_the_chat_is_created_sends_nothing(
    runtime: Any, server: FakeCoderServer
) -> None:
    """E.5: a first turn cancelled while the request creating its chat is unanswered has no
    chat id to interrupt. The server created the chat (its answer is held back), nothing is
    sent to it, the caller gets its runtime's deadline error, and the agent's
    next turn starts a chat of its own."""
    server.config.scripts.add("stuck", STUCK)

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        rule = server.faults.delay_requests("create_chat", 3.0, times=1)
        error = await rt.within(1.5, "generate", agent, "stuck")
        assert rule.remaining == 0, "the deadline expired before the chat was created"
        # Past the held answer: a late response would have let an interrupt go out by now.
        await rt.sleep(2.0)
        interrupts = ops(server, "interrupt_chat")
        after, idle = await follow_up_and_close(rt, server, agent)
        return error, interrupts, after, idle

    error, interrupts, after, idle = runtime.run(scenario)
    assert isinstance(error, runtime.deadline_error)
    assert interrupts == 0
    assert isinstance(after, GenerateResult) and after.text == "You said: are you there?"
    assert ops(server, "create_chat") == 2
    assert idle


def test_d22_cancelled_in_the_rest_phase(runtime: Any, server: FakeCoderServer) -> None:
    server.config.scripts.add("stuck", STUCK)

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        await rt.generate(agent, "hello")
        rule = server.faults.delay_requests("create_chat_message", 1.0, times=1)
        error = await rt.within(0.3, "generate", agent, "stuck")
        interrupts = await settled(rt, server)
        assert rule.remaining == 0
        return (error, interrupts, *await follow_up_and_close(rt, server, agent))

    check(runtime, runtime.run(scenario))


def test_d22_cancelled_before_the_first_frame(runtime: Any, server: FakeCoderServer) -> None:
    server.config.scripts.add("stuck", STUCK)

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        await rt.generate(agent, "hello")
        server.faults.stall_frames(after_frames=0, seconds=None, times=1)
        error = await rt.within(0.5, "generate", agent, "stuck")
        interrupts = await settled(rt, server)
        return (error, interrupts, *await follow_up_and_close(rt, server, agent))

    check(runtime, runtime.run(scenario))


def test_d22_cancelled_mid_stream(runtime: Any, server: FakeCoderServer) -> None:
    server.config.scripts.add("stuck", STUCK)

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server)
        await rt.generate(agent, "hello")
        error = await rt.within(0.5, "stream", agent, "stuck")
        interrupts = await settled(rt, server)
        return (error, interrupts, *await follow_up_and_close(rt, server, agent))

    check(runtime, runtime.run(scenario))


def test_d22_cancelled_while_a_client_tool_runs(runtime: Any, server: FakeCoderServer) -> None:
    """The cancellation lands while the tool runs (it is fired once the tool started, not at
    a guessed moment: a fixed deadline can expire before the pause on a slow first call, in
    the fresh chat's REST phase, where no chat is known to interrupt, G.6). The paused chat
    is interrupted with D4's follow-up, and no result is submitted for the abandoned call."""
    release = threading.Event()
    calls: list[str] = []

    def slow_lookup(city: str) -> str:
        calls.append(city)
        release.wait(10.0)
        return "sunny"

    server.config.scripts.add(
        "weather",
        Script((CallClientTool(name="slow_lookup", args={"city": "Oslo"}), Say("{tool_result}"))),
    )

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, tools=[slow_lookup])
        error = await rt.cancel_when(lambda: bool(calls), "generate", agent, "weather please")
        interrupts = await settled(rt, server)
        release.set()
        return (error, interrupts, *await follow_up_and_close(rt, server, agent))

    outcome = runtime.run(scenario)
    check(runtime, outcome, posts=2, cancelled=True)
    # D5/D22: the cancelled pause never submits results for the abandoned calls.
    assert calls == ["Oslo"] and ops(server, "submit_tool_results") == 0


def test_d22_a_deadline_while_a_client_tool_runs_interrupts_the_paused_chat(
    runtime: Any, server: FakeCoderServer
) -> None:
    """The caller's deadline in the same phase: the chat exists already (a first turn ran),
    so however slowly the second turn reaches its pause, the tool is running when the
    generous deadline expires; the interrupt carries D4's follow-up."""
    release = threading.Event()
    calls: list[str] = []

    def slow_lookup(city: str) -> str:
        calls.append(city)
        release.wait(10.0)
        return "sunny"

    server.config.scripts.add(
        "weather",
        Script((CallClientTool(name="slow_lookup", args={"city": "Oslo"}), Say("{tool_result}"))),
    )

    async def scenario(rt: Any) -> Any:
        agent = await rt.agent(server, tools=[slow_lookup])
        await rt.generate(agent, "hello")
        error = await rt.within(1.5, "generate", agent, "weather please")
        assert calls == ["Oslo"], "the deadline expired before the tool ran"
        interrupts = await settled(rt, server)
        release.set()
        return (error, interrupts, *await follow_up_and_close(rt, server, agent))

    check(runtime, runtime.run(scenario), posts=2)
    assert ops(server, "submit_tool_results") == 0


def test_d22_h4_cancelled_during_archive(runtime: Any, make_server: MakeServer) -> None:
    server = make_server(interrupt_delay=1.5)
    server.config.scripts.add("stuck", STUCK)

    async def scenario(rt: Any) -> Any:
        probe = await rt.agent(server)
        chat = await rt.client_call(
            probe, "create_chat", organization_id=server.organization_id, content="stuck"
        )
        await rt.close(probe)
        agent = await rt.agent(server, chat_id=chat.id)
        # H.4: stop the run, then archive while it winds down (interrupt_delay): 409s.
        await rt.interrupt(agent)
        error = await rt.within(0.6, "archive", agent)
        statuses = [r.status for r in server.counters.request_log if r.op == "update_chat"]
        await rt.until(lambda: not server.open_websockets)
        await rt.sleep(1.6)
        # The cancelled archive fired no second interrupt; the agent continues on the chat.
        interrupts = ops(server, "interrupt_chat")
        after, idle = await follow_up_and_close(rt, server, agent)
        return error, interrupts, after, idle, statuses

    error, interrupts, after, idle, statuses = runtime.run(scenario)
    check(runtime, (error, interrupts, after, idle))
    # The archive was refused while the chat wound down (D10: 409 retried) when cancelled.
    assert len(statuses) >= 2 and set(statuses) == {409}


def test_d22_the_first_asyncio_call_spends_none_of_its_deadline_on_imports() -> None:
    """httpx's first request on asyncio imports its anyio backend (about 0.1-0.2 s here,
    seconds on a loaded machine, which pushed a 0.5 s deadline meant for the tool phase back
    into the fresh chat's REST phase). A client does that import when it is created, so the
    first call's deadline (D22) is the caller's to spend. Checked in a fresh interpreter."""
    code = (
        "import sys\n"
        "from coder_io_asyncio import CoderChatClient\n"
        "backends = ('httpcore._backends.anyio', 'anyio._backends._asyncio')\n"
        "before = [m for m in backends if m in sys.modules]\n"
        "CoderChatClient('http://127.0.0.1:9', 'tok')\n"
        "print(before, [m for m in backends if m in sys.modules])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[] ['httpcore._backends.anyio', 'anyio._backends._asyncio']"
