"""The served fake from plain threads (``with FakeCoderServer()``: its own loop in a thread),
driven through ``httpx.Client`` and blocking sockets + wsproto. Faults are changed from other
threads while clients are connected; many servers start and stop cheaply; nothing leaks."""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import socket
import threading
import time

import httpx
import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto.fake import CallClientTool, FakeConfig, Faults, Say, Script, Wait

from .netclients import SyncWs
from .support import V2, WEATHER_TOOL, messages_of, statuses, text_of


def client(server: FakeCoderServer) -> httpx.Client:
    return httpx.Client(
        base_url=server.url, headers={"Coder-Session-Token": server.token}, verify=False
    )


def create(
    http: httpx.Client, server: FakeCoderServer, text: str = "hello", **fields: object
) -> str:
    body = {
        "organization_id": server.organization_id,
        "content": [{"type": "text", "text": text}],
        **fields,
    }
    response = http.post(V2, json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def test_values_the_server_exposes() -> None:
    with FakeCoderServer(token="fixed-token", seed=5) as server:
        assert server.url.startswith("http://127.0.0.1:")
        assert server.port > 0
        assert server.token == "fixed-token"
        assert server.organization_id == server.model.organization_id
        assert "fixed-token" not in repr(server)
        assert "fixed-token" not in repr(server.config)
        with client(server) as http:
            assert http.get(V2).json() == []
    with FakeCoderServer() as other:
        assert other.token.startswith("fake-") and len(other.token) > 20


def test_hundreds_of_servers_start_and_stop_cheaply() -> None:
    for _ in range(100):
        with FakeCoderServer() as server:
            assert server.port
        assert server.open_connections == 0


def test_a_turn_from_a_thread_and_no_leaks() -> None:
    with FakeCoderServer(chunk_delay=0.001) as server, client(server) as http:
        server.config.scripts.push(Script((Wait(0.2), Say("hi there"))))
        chat_id = create(http, server)
        with SyncWs(server, f"{V2}/{chat_id}/stream") as ws:
            events = ws.wait_status({"waiting"})
            assert text_of(messages_of(events)[-1]) == "hi there"
            assert server.open_websockets == 1
        http.close()
        assert server.wait_idle(5.0)
        assert server.counters.open_streams == 0


def test_faults_changed_from_another_thread_while_streaming() -> None:
    """Fault injection from plain threads: a drop set while a socket is open applies to the
    next connection; a redial sees the turn settle (turn-04)."""
    with FakeCoderServer(chunk_delay=0.01) as server, client(server) as http:
        server.config.scripts.push(Script((Wait(0.3), Say("a b c d e f g h"))))
        chat_id = create(http, server)
        setter = threading.Thread(
            target=server.faults.close_before_terminal_status, kwargs={"times": 1}
        )
        setter.start()
        setter.join()
        with SyncWs(server, f"{V2}/{chat_id}/stream") as first:
            first.wait_end()
            assert "waiting" not in statuses(first.raw.events())
            assert first.raw.close_code is None
        with SyncWs(server, f"{V2}/{chat_id}/stream") as second:
            assert "waiting" in statuses(second.wait_status({"waiting"}))


def test_concurrent_clients_from_many_threads() -> None:
    with FakeCoderServer(chunk_delay=0.001) as server:

        def one_turn(n: int) -> str:
            with client(server) as http:
                chat_id = create(http, server, f"thread {n}")
                with SyncWs(server, f"{V2}/{chat_id}/stream") as ws:
                    ws.wait_status({"waiting"})
                history = http.get(f"{V2}/{chat_id}/messages").json()["messages"]
                return text_of(history[0])

        with concurrent.futures.ThreadPoolExecutor(8) as pool:
            answers = list(pool.map(one_turn, range(16)))
        assert answers == [f"You said: thread {n}" for n in range(16)]
        assert server.wait_idle(5.0)
        ids = [m.id for chat in server.model.chats.values() for m in chat.messages]
        assert len(ids) == len(set(ids)), "one global id sequence"


def test_client_tool_flow_and_watch_from_threads() -> None:
    script = Script(
        (Wait(0.2), CallClientTool(name="get_weather", args={"city": "Oslo"}), Say("{tool_result}"))
    )
    with FakeCoderServer(chunk_delay=0.001) as server, client(server) as http:
        with SyncWs(server, f"{V2}/watch") as watch:
            server.config.scripts.push(script)
            chat_id = create(http, server, "weather", unsafe_dynamic_tools=[WEATHER_TOOL])
            with SyncWs(server, f"{V2}/{chat_id}/stream") as ws:
                ws.wait(lambda r: any(e["type"] == "action_required" for e in r.events()))
                call = next(e for e in ws.raw.events() if e["type"] == "action_required")
                call_id = call["action_required"]["tool_calls"][0]["tool_call_id"]
                assert (
                    http.post(
                        f"{V2}/{chat_id}/tool-results",
                        json={"results": [{"tool_call_id": call_id, "output": "cold"}]},
                    ).status_code
                    == 204
                )
                events = ws.wait_status({"waiting"})
                assert text_of(messages_of(events)[-1]) == '"cold"'
            watch.wait(lambda r: any(e["kind"] == "action_required" for e in r.watch_events()))
            kinds = [e["kind"] for e in watch.raw.watch_events()]
            assert kinds[0] == "created"
            paused = next(e for e in watch.raw.watch_events() if e["kind"] == "action_required")
            assert json.loads(paused["tool_calls"][0]["args"]) == {"city": "Oslo"}


def test_stall_and_delay_faults_over_the_wire() -> None:
    with FakeCoderServer(chunk_delay=0.001) as server, client(server) as http:
        chat_id = create(http, server)
        server.faults.stall_frames(after_frames=1)
        with SyncWs(server, f"{V2}/{chat_id}/stream") as stalled:
            stalled.wait(lambda r: len(r.frames) == 1)
            with pytest.raises(TimeoutError):
                stalled.wait(lambda r: len(r.frames) > 1, timeout=0.3)
            assert not stalled.raw.eof, "a stalled socket stays open"
        server.faults.delay_frames(0.05, times=1)
        with SyncWs(server, f"{V2}/{chat_id}/stream") as delayed:
            assert "waiting" in statuses(delayed.wait_status({"waiting"}))


def test_pings_are_control_frames_and_a_client_close_is_answered() -> None:
    with FakeCoderServer(ping_interval=0.02) as server, client(server) as http:
        chat_id = create(http, server)
        with SyncWs(server, f"{V2}/{chat_id}/stream") as ws:
            ws.wait(lambda r: r.pings >= 3)
            assert all(frame.startswith(b"[") for frame in ws.raw.frames), "pings are not JSON"
            ws.raw.close()
            ws.send_raw()
            ws.wait_end()
            assert ws.raw.close_code == 1000


def test_oversized_bodies_and_bad_requests_at_the_adapter() -> None:
    """Bodies beyond what any route accepts get 413 from the adapter itself; unparseable
    HTTP gets 400."""
    with FakeCoderServer() as server:
        with socket.create_connection((server.host, server.port), timeout=10) as sock:
            size = 12 * 1024 * 1024
            head = f"POST {V2}/files HTTP/1.1\r\nHost: x\r\nContent-Length: {size}\r\n\r\n"
            sock.sendall(head.encode())

            def flood() -> None:
                with contextlib.suppress(OSError):
                    sock.sendall(b"x" * size)

            sender = threading.Thread(target=flood)
            sender.start()
            assert sock.recv(100).startswith(b"HTTP/1.1 413")
            sock.shutdown(socket.SHUT_RDWR)
            sender.join()
        with socket.create_connection((server.host, server.port)) as sock:
            sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nContent-Length: nope\r\n\r\n")
            assert sock.recv(100).startswith(b"HTTP/1.1 400")
        assert server.wait_idle(5.0)


def test_server_stop_closes_open_websockets() -> None:
    server = FakeCoderServer()
    server.start()
    with client(server) as http:
        chat_id = create(http, server)
    ws = SyncWs(server, f"{V2}/{chat_id}/stream")
    ws.wait(lambda r: bool(r.frames))
    started = time.monotonic()
    server.stop()
    server.stop()
    assert time.monotonic() - started < 5.0
    ws.wait_end()
    assert ws.raw.close_code in (1001, None)
    ws.close()
    with pytest.raises(RuntimeError):
        server.start().start()
    server.stop()


def test_shared_config_and_faults_objects_and_bad_overrides() -> None:
    config = FakeConfig(stamp_promotions=False)
    faults = Faults(seed=1)
    with FakeCoderServer(config=config, faults=faults, chunk_delay=0.0) as server:
        assert server.config.stamp_promotions is False
        assert server.config.chunk_delay == 0.0
        server.config.legacy_only = True
        with client(server) as http:
            assert http.get(V2).status_code == 404
        faults.chatd_disabled = True
        with client(server) as http:
            assert http.post("/api/experimental/chats", json={}).status_code == 503
    with pytest.raises(TypeError):
        FakeCoderServer(no_such_option=1)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(OSError):
            FakeCoderServer(port=port).start()


def test_locked_proxies_copy_containers_and_wrap_methods() -> None:
    with FakeCoderServer() as server, client(server) as http:
        chat_id = create(http, server)
        chats = server.model.chats
        assert list(chats) == [chat_id]
        chats.clear()
        assert list(server.model.chats) == [chat_id], "readers get copies"
        assert "locked" in repr(server.model)
        server.config.scripts.push(Script((Say("pushed through the proxy"),)))
        second = create(http, server)
        with SyncWs(server, f"{V2}/{second}/stream") as ws:
            events = ws.wait_status({"waiting"})
        assert text_of(messages_of(events)[-1]) == "pushed through the proxy"
