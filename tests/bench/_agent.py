"""Driving the real client and the fake server for benchmarks 3-5.

``agent_class(runtime)`` finds ``CoderAgent`` in ``coder_io_asyncio`` / ``coder_io_trio`` /
``coder_io_sync``; ``ServerProcess`` runs the fake server (``tests.bench._server``) in a child
process; ``bare_turn`` is the end-to-end floor: one turn read with a plain socket, wsproto and
``json.loads``, nothing else. Whatever is missing raises ``BenchSkipped`` with the reason.
"""

from __future__ import annotations

import contextlib
import http.client
import importlib
import inspect
import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any
from urllib.parse import urlsplit

from wsproto import ConnectionType, WSConnection
from wsproto.events import AcceptConnection, CloseConnection, Request, TextMessage

from ._common import BenchSkipped
from ._data import ROOT

__all__ = [
    "RUNTIMES",
    "ServerProcess",
    "agent_class",
    "bare_turn",
    "core_turn_asyncio",
    "make_agent",
    "require_fake_server",
    "run_on",
    "stream_turn",
    "timed",
]

RUNTIMES = ("asyncio", "trio", "sync")
_MODULES = {"asyncio": "coder_io_asyncio", "trio": "coder_io_trio", "sync": "coder_io_sync"}
#: Chat statuses that end a turn (wire 3.3).
TERMINAL = frozenset({"waiting", "completed", "error", "requires_action"})
PROMPT = "Stream the benchmark transcript."


def agent_class(runtime: str) -> Any:
    """``CoderAgent`` of ``runtime``'s adapter, or ``BenchSkipped`` saying what is missing."""
    module_name = _MODULES[runtime]
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # a missing or broken adapter is reported, not fatal
        raise BenchSkipped(
            f"{module_name} cannot be imported ({type(exc).__name__}: {exc})"
        ) from None
    cls = getattr(module, "CoderAgent", None)
    if cls is None:
        raise BenchSkipped(f"{module_name}.CoderAgent does not exist yet")
    return cls


def require_fake_server() -> None:
    try:
        importlib.import_module("coder_integrations.fake_server")
    except Exception as exc:  # a missing or broken fake server is reported, not fatal
        raise BenchSkipped(
            f"coder_integrations.fake_server cannot be imported ({type(exc).__name__}: {exc})"
        ) from None


class ServerProcess:
    """The fake server streaming the ``deltas`` transcript on every turn, in a child process
    (``with`` starts and stops it). ``info`` has ``url``, ``token``, ``organization_id``.

    ``start_delay`` leaves the client time to open its stream before the model starts.
    ``chunk_delay`` (default: the run lasts at least 50 ms) keeps the run open across several
    of the server's syncs: like the real server, the fake relays deltas only while their
    episode is open, so a run that starts and ends between two syncs arrives as its
    committed snapshot alone.

    ``ping_interval`` is the fake's heartbeat (a ping every so many seconds, the connection
    closed when its pong is that late): a process opening thousands of streams answers late,
    and the heartbeat is not what a benchmark measures."""

    def __init__(
        self,
        deltas: int,
        *,
        start_delay: float = 0.3,
        chunk_delay: float | None = None,
        ping_interval: float = 15.0,
        startup_timeout: float = 60.0,
    ) -> None:
        self.deltas = deltas
        if chunk_delay is None:
            chunk_delay = max(1e-5, 0.05 / max(deltas, 1))
        self._argv = [
            sys.executable,
            "-m",
            "tests.bench._server",
            "--deltas",
            str(deltas),
            "--start-delay",
            str(start_delay),
            "--chunk-delay",
            str(chunk_delay),
            "--ping-interval",
            str(ping_interval),
        ]
        self._timeout = startup_timeout
        self._proc: subprocess.Popen[str] | None = None
        self.info: dict[str, Any] = {}

    def __enter__(self) -> ServerProcess:
        require_fake_server()
        proc = subprocess.Popen(
            self._argv,
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._proc = proc
        assert proc.stdout is not None
        ready, _, _ = select.select([proc.stdout], [], [], self._timeout)
        line = proc.stdout.readline() if ready else ""
        if not line:
            self.__exit__(None, None, None)
            err = (proc.stderr.read() if proc.stderr else "").strip().splitlines()
            raise BenchSkipped(
                "the fake server did not start: " + (err[-1] if err else "no output")
            )
        self.info = json.loads(line)
        return self

    def __exit__(self, *exc: object) -> None:
        proc = self._proc
        if proc is None:
            return
        self._proc = None
        with contextlib.suppress(OSError):
            if proc.stdin:
                proc.stdin.close()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        for stream in (proc.stdout, proc.stderr):
            if stream:
                stream.close()


def make_agent(cls: Any, info: dict[str, Any], **extra: Any) -> Any:
    """A ``CoderAgent`` for the fake server. The URL and token go in as keyword arguments
    when the constructor has them, and in ``CODER_URL`` / ``CODER_SESSION_TOKEN`` anyway."""
    os.environ["CODER_URL"] = info["url"]
    os.environ["CODER_SESSION_TOKEN"] = info["token"]
    params = inspect.signature(cls).parameters
    kwargs: dict[str, Any] = {"organization_id": info["organization_id"]}
    if info.get("model") and "model" in params:
        kwargs["model"] = info["model"]
    for names, value in (
        (("base_url", "url", "coder_url"), info["url"]),
        (("session_token", "token"), info["token"]),
    ):
        for name in names:
            if name in params:
                kwargs[name] = value
                break
    kwargs.update({k: v for k, v in extra.items() if k in params})
    return cls(**kwargs)


def run_on(runtime: str, main: Callable[[], Any]) -> Any:
    """Run ``main`` (a coroutine function, or a plain function for ``sync``) to completion on
    ``runtime``."""
    if runtime == "asyncio":
        import asyncio

        return asyncio.run(main())
    if runtime == "trio":
        try:
            import trio
        except ImportError:
            raise BenchSkipped("trio is not installed") from None
        return trio.run(main)
    return main()


def stream_turn(
    runtime: str, agent: Any, prompt: str = PROMPT, stats: dict[str, int] | None = None
) -> Any:
    """A coroutine (or, on ``sync``, the result) consuming one turn through
    ``agent.stream(prompt).text_stream``; returns the number of characters received.
    ``stats["deltas"]`` receives the number of text pieces (one means the turn arrived as
    its committed snapshot alone, not as streamed deltas)."""
    if runtime == "sync":
        chars = pieces = 0
        with agent.stream(prompt) as stream:
            for delta in stream.text_stream:
                chars += len(delta)
                pieces += 1
        if stats is not None:
            stats["deltas"] = pieces
        return chars

    async def consume() -> int:
        chars = pieces = 0
        async with agent.stream(prompt) as stream:
            async for delta in stream.text_stream:
                chars += len(delta)
                pieces += 1
        if stats is not None:
            stats["deltas"] = pieces
        return chars

    return consume()


def _create_chat(host: str, port: int, info: dict[str, Any], prompt: str) -> str:
    conn = http.client.HTTPConnection(host, port, timeout=60)
    try:
        body = json.dumps(
            {
                "organization_id": info["organization_id"],
                "content": [{"type": "text", "text": prompt}],
                "client_type": "api",
            }
        )
        conn.request(
            "POST",
            "/api/v2/chats",
            body,
            {
                "Coder-Session-Token": info["token"],
                "Content-Type": "application/json",
            },
        )
        response = conn.getresponse()
        data = response.read()
        if response.status >= 300:
            raise RuntimeError(f"creating a chat failed: {response.status} {data[:200]!r}")
        return str(json.loads(data)["id"])
    finally:
        conn.close()


def bare_turn(
    info: dict[str, Any], prompt: str = PROMPT, loads: Callable[[str], Any] = json.loads
) -> int:
    """The floor of benchmark 3: create a chat (one plain HTTP request), then read its stream
    with a socket, wsproto and ``loads`` until a terminal status; returns the text characters
    seen in ``message_part`` deltas."""
    url = urlsplit(info["url"])
    host, port = url.hostname or "127.0.0.1", url.port or 80
    chat_id = _create_chat(host, port, info, prompt)
    sock = socket.create_connection((host, port), timeout=120)
    ws = WSConnection(ConnectionType.CLIENT)
    chars = 0
    try:
        sock.sendall(
            ws.send(
                Request(
                    host=f"{host}:{port}",
                    target=f"/api/v2/chats/{chat_id}/stream",
                    extra_headers=[(b"Coder-Session-Token", info["token"].encode())],
                )
            )
        )
        pending: list[str] = []
        done = False
        while not done:
            data = sock.recv(65536)
            if not data:
                raise RuntimeError("the fake server closed the stream before the turn ended")
            ws.receive_data(data)
            for event in ws.events():
                if isinstance(event, TextMessage):
                    pending.append(event.data)
                    if not event.message_finished:
                        continue
                    value = loads("".join(pending))
                    pending.clear()
                    for item in value if isinstance(value, list) else [value]:
                        kind = item.get("type")
                        if kind == "message_part":
                            part = item["message_part"]["part"]
                            if part.get("type") == "text":
                                chars += len(part.get("text") or "")
                        elif kind == "status" and item["status"]["status"] in TERMINAL:
                            done = True
                elif isinstance(event, AcceptConnection):
                    continue
        sock.sendall(ws.send(CloseConnection(code=1000)))
    finally:
        sock.close()
    return chars


@contextlib.contextmanager
def timed() -> Iterator[dict[str, float]]:
    """Wall and CPU seconds of the enclosed block, filled in on exit."""
    out: dict[str, float] = {}
    wall, cpu = time.perf_counter(), time.process_time()
    try:
        yield out
    finally:
        out["wall"] = time.perf_counter() - wall
        out["cpu"] = time.process_time() - cpu


async def core_turn_asyncio(
    info: dict[str, Any],
    prompt: str = PROMPT,
    *,
    opened: Callable[[], Awaitable[None]] | None = None,
    marks: dict[str, float] | None = None,
) -> int:
    """One turn through the core on a minimal asyncio driver: the chat is created as in
    ``bare_turn``, then ``StreamReader`` and ``TurnTranslator`` run over an asyncio stream
    until the translator has a terminal status. A stand-in for ``CoderAgent.stream`` (the
    same machines, no session or segment logic) while the adapters are missing; returns the
    text characters of the ``TextDelta`` parts.

    ``opened`` is awaited once, when the first stream event arrived (the chat is open);
    ``marks["first_delta_cpu"]`` receives the process CPU time at the first delta and
    ``marks["reads"]`` the number of socket reads."""
    import asyncio

    from coder_proto import TextDelta
    from coder_proto._actions import CloseConnection as CloseAction
    from coder_proto._actions import OpenConnection, SendData
    from coder_proto._stream.reader import StreamReader
    from coder_proto._stream.translator import TurnTranslator
    from coder_proto._wire.events import MessagePartEvent

    url = urlsplit(info["url"])
    host, port = url.hostname or "127.0.0.1", url.port or 80
    chat_id = _create_chat(host, port, info, prompt)
    loop = asyncio.get_running_loop()
    reader = StreamReader(
        chat_id=chat_id,
        base_url=info["url"],
        prefix="/api/v2/chats",
        after_id=None,
        token=info["token"],
        reader_id=1,
    )
    translator = TurnTranslator(chat_id=chat_id)
    stream: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None

    async def perform() -> None:
        nonlocal stream, writer
        for action in reader.actions():
            if isinstance(action, OpenConnection):
                stream, writer = await asyncio.open_connection(action.host, action.port)
                reader.connection_made(action.conn_id, loop.time())
                await perform()
            elif isinstance(action, SendData) and writer is not None:
                writer.write(action.data)
            elif isinstance(action, CloseAction) and writer is not None:
                writer.close()
                writer = None

    chars = 0
    reader.start(loop.time())
    await perform()
    events = reader.events
    waiting_open = opened is not None
    waiting_delta = marks is not None
    while not translator.settled and not reader.done and stream is not None:
        data = await stream.read(65536)
        if marks is not None:
            marks["reads"] = marks.get("reads", 0) + 1
        if not data:
            reader.connection_lost(1, loop.time())
        else:
            reader.data_received(1, data, loop.time())
        await perform()
        while events:
            event = events.popleft()
            if waiting_open and opened is not None:
                waiting_open = False
                await opened()
            if waiting_delta and marks is not None and type(event) is MessagePartEvent:
                waiting_delta = False
                marks["first_delta_cpu"] = time.process_time()
            for part in translator.ingest(event):
                if type(part) is TextDelta:
                    chars += len(part.delta)
    for _part in translator.finish():
        pass
    reader.close(loop.time())
    await perform()
    if reader.error is not None:
        raise RuntimeError(f"the stream failed: {reader.error}")
    return chars
