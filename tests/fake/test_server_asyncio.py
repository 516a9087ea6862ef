"""The served fake on asyncio (``async with FakeCoderServer()``), driven through plain
``httpx`` and a raw asyncio socket + wsproto client: every route and stream behaviour of
server-behaviour section 8 over real loopback HTTP and WebSocket."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto.fake import CallClientTool, Fail, Retry, Say, Script, Wait

from .netclients import AsyncWs
from .support import (
    LEGACY,
    V2,
    WEATHER_TOOL,
    delta_text,
    messages_of,
    statuses,
    text_of,
    types,
)

LONG = Script((Say("partial "), Wait(30.0), Say("rest")))
#: The leading wait lets a test's socket connect while the chat is still running.
TOOL = Script(
    (
        Wait(0.3),
        CallClientTool(name="get_weather", args={"city": "Paris"}),
        Wait(0.2),
        Say("It is {tool_result}."),
    )
)


def run(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        asyncio.run(fn(*args, **kwargs))

    return wrapper


class Harness:
    """One served fake plus an httpx client bound to it."""

    def __init__(self, server: FakeCoderServer, http: httpx.AsyncClient, prefix: str = V2):
        self.server = server
        self.http = http
        self.prefix = prefix

    async def create(
        self, text: str = "hello", *, script: Script | None = None, **fields: Any
    ) -> str:
        if script is not None:
            self.server.config.scripts.push(script)
        body = {
            "organization_id": self.server.organization_id,
            "content": [{"type": "text", "text": text}],
            **fields,
        }
        response = await self.http.post(self.prefix, json=body)
        assert response.status_code == 201, response.text
        assert response.json()["status"] == "running"
        return str(response.json()["id"])

    async def send(
        self, chat_id: str, text: str, *, busy: str | None = None, script: Script | None = None
    ) -> httpx.Response:
        if script is not None:
            self.server.config.scripts.push(script)
        body: dict[str, Any] = {"content": [{"type": "text", "text": text}]}
        if busy is not None:
            body["busy_behavior"] = busy
        return await self.http.post(f"{self.prefix}/{chat_id}/messages", json=body)

    async def stream(self, chat_id: str, after_id: int | None = None, **kwargs: Any) -> AsyncWs:
        target = f"{self.prefix}/{chat_id}/stream" + (
            f"?after_id={after_id}" if after_id is not None else ""
        )
        return await AsyncWs.connect(self.server, target, **kwargs)

    async def status(self, chat_id: str) -> str:
        return str((await self.http.get(f"{self.prefix}/{chat_id}")).json()["status"])

    async def wait_status(self, chat_id: str, wanted: set[str], timeout: float = 10.0) -> None:
        async with asyncio.timeout(timeout):
            while await self.status(chat_id) not in wanted:
                await asyncio.sleep(0.005)


def served(**options: Any) -> Callable[[Callable[[Harness], Awaitable[None]]], Callable[[], None]]:
    """Run the test body against a fresh server with ``options``; afterwards prove that every
    connection was closed."""

    def decorate(body: Callable[[Harness], Awaitable[None]]) -> Callable[[], None]:
        @functools.wraps(body)
        def test() -> None:
            async def main() -> None:
                opts = dict(options)
                prefix = opts.pop("prefix", V2)
                async with FakeCoderServer(**opts) as server:
                    async with httpx.AsyncClient(
                        base_url=server.url,
                        headers={"Coder-Session-Token": server.token},
                        verify=False,
                    ) as http:
                        await body(Harness(server, http, prefix))
                    assert await server.wait_idle_async(5.0), "a connection leaked"
                    assert server.counters.open_streams == 0
                    assert server.counters.open_watches == 0

            asyncio.run(main())

        test.__signature__ = inspect.Signature()  # type: ignore[attr-defined]
        return test

    return decorate


# -- a full turn --------------------------------------------------------------------------------


@served(chunk_delay=0.001)
async def test_a_turn_over_the_wire(h: Harness) -> None:
    """Create is 201 ``running``; the stream's frames are arrays plus a newline; the snapshot
    is message → status → preview_reset; deltas carry seq from 1 (server-behaviour 8.4,
    8.5, 8.11, 8.14)."""
    answer = Say("one two three")
    # The wait keeps the episode open long enough for the socket to join it.
    chat_id = await h.create("hello there", script=Script((Wait(0.3), answer)))
    ws = await h.stream(chat_id)
    events = await ws.wait_status({"waiting"})
    for frame in ws.raw.frames:
        assert frame.endswith(b"\n") and frame.startswith(b"[")
    assert types(events)[:3] == ["message", "status:running", "preview_reset"]
    parts = [e["message_part"] for e in events if e["type"] == "message_part"]
    assert [p["seq"] for p in parts] == [1, 2, 3]
    assert delta_text(events) == answer.text
    assert types(events)[-3:] == ["message", "status:waiting", "preview_reset"]
    assert text_of(messages_of(events)[-1]) == answer.text
    chat = (await h.http.get(f"{V2}/{chat_id}")).json()
    assert chat["status"] == "waiting"
    await ws.close()
    assert ws.raw.close_code == 1000


@served(chunk_delay=0.02)
async def test_deltas_stream_live_and_replay_from_seq_1_after_reconnect(h: Harness) -> None:
    """Server-behaviour 8.4/8.5: a second socket joining mid-turn gets the snapshot
    (after_id-filtered), then the current episode from seq 1."""
    chat_id = await h.create("hi", script=Script((Say("a b c d e f g h i j"),)))
    first = await h.stream(chat_id)
    await first.wait(lambda r: sum(1 for e in r.events() if e["type"] == "message_part") >= 3)
    user_id = messages_of(first.raw.events())[0]["id"]
    second = await h.stream(chat_id, after_id=user_id)
    await second.wait(lambda r: any(e["type"] == "message_part" for e in r.events()))
    snapshot = second.raw.events()
    assert types(snapshot)[:2] == ["status:running", "preview_reset"], "no message <= after_id"
    replay = [e["message_part"] for e in snapshot if e["type"] == "message_part"]
    assert replay[0]["seq"] == 1
    events = await second.wait_status({"waiting"})
    assert delta_text(events) == "a b c d e f g h i j"
    final = await first.wait_status({"waiting"})
    assert delta_text(final) == "a b c d e f g h i j"
    await first.close()
    await second.close()


@served(experimental_mount=True)
async def test_prefixes_auth_and_model_routes(h: Harness) -> None:
    chat_id = await h.create()
    assert (await h.http.get(f"{LEGACY}/{chat_id}")).status_code == 200
    async with httpx.AsyncClient(base_url=h.server.url, verify=False) as anonymous:
        assert (await anonymous.get(f"{V2}/{chat_id}")).status_code == 401
        assert (
            await anonymous.get(f"{V2}/{chat_id}", headers={"Coder-Session-Token": "wrong"})
        ).status_code == 401
    rejected = await h.stream(chat_id, token="wrong")
    assert rejected.raw.accepted is False
    assert rejected.raw.reject_status == 401
    await rejected.close()
    org = h.server.organization_id
    models = (await h.http.get(f"/api/v2/organizations/{org}/chats/models")).json()
    assert {m["model"] for m in models["models"]} >= {"claude-sonnet-4-6"}
    assert (await h.http.get(f"{V2}/model-configs")).status_code == 404
    assert (await h.http.get(f"{V2}/models")).status_code == 404
    assert (await h.http.get(f"{LEGACY}/model-configs")).status_code == 200


@served(legacy_only=True, prefix=LEGACY)
async def test_legacy_only_mode(h: Harness) -> None:
    """A v2-first client must fall back: ``/api/v2`` answers 404 for REST and upgrades."""
    assert (await h.http.get(V2)).status_code == 404
    assert (await h.http.post(V2, json={})).status_code == 404
    chat_id = await h.create(script=LONG)
    v2_socket = await AsyncWs.connect(h.server, f"{V2}/{chat_id}/stream")
    assert v2_socket.raw.reject_status == 404
    await v2_socket.close()
    ws = await h.stream(chat_id)
    await ws.wait(lambda r: bool(r.frames))
    assert "status:running" in types(ws.raw.events())
    await ws.close()
    org = h.server.organization_id
    assert (await h.http.get(f"/api/v2/organizations/{org}/chats/models")).status_code == 404
    assert len((await h.http.get(f"{LEGACY}/model-configs")).json()) == 3


@served()
async def test_the_default_serves_chats_under_v2_only(h: Harness) -> None:
    """D36: the served fake is the newest server: the experimental prefix answers 404 for
    chat routes and stream upgrades."""
    chat_id = await h.create()
    assert (await h.http.get(f"{V2}/{chat_id}")).status_code == 200
    legacy = await h.http.get(f"{LEGACY}/{chat_id}")
    assert legacy.status_code == 404
    assert legacy.json()["message"] == "Route not found."
    socket = await AsyncWs.connect(h.server, f"{LEGACY}/{chat_id}/stream")
    assert socket.raw.reject_status == 404
    await socket.close()


@served(chunk_delay=0.001)
async def test_client_tool_round_trip_on_one_socket(h: Harness) -> None:
    """Server-behaviour 8.8: status before ``action_required`` (args a JSON string), the
    exact-set 400s, 204, then the turn resumes on the same socket."""
    chat_id = await h.create("weather", script=TOOL, unsafe_dynamic_tools=[WEATHER_TOOL])
    ws = await h.stream(chat_id)
    await ws.wait(lambda r: any(e["type"] == "action_required" for e in r.events()))
    events = ws.raw.events()
    kinds = types(events)
    assert kinds.index("status:requires_action") + 1 == kinds.index("action_required")
    calls = next(e for e in events if e["type"] == "action_required")["action_required"][
        "tool_calls"
    ]
    assert json.loads(calls[0]["args"]) == {"city": "Paris"} and isinstance(calls[0]["args"], str)
    call_id = calls[0]["tool_call_id"]
    url = f"{V2}/{chat_id}/tool-results"
    missing = await h.http.post(url, json={"results": [{"tool_call_id": "other", "output": 1}]})
    assert missing.status_code == 400
    assert missing.json()["message"] == "Missing tool result."
    ok = await h.http.post(url, json={"results": [{"tool_call_id": call_id, "output": {"c": 21}}]})
    assert ok.status_code == 204 and ok.content == b""
    again = await h.http.post(url, json={"results": [{"tool_call_id": call_id, "output": 1}]})
    assert again.status_code == 409
    events = await ws.wait_status({"waiting"})
    assert statuses(events) == ["running", "requires_action", "running", "waiting"]
    assert text_of(messages_of(events)[-1]) == 'It is {"c":21}.'
    await ws.close()


@pytest.mark.parametrize("stamp", [True, False])
def test_promotion_without_terminal_status_and_watch(stamp: bool) -> None:
    @served(chunk_delay=0.002, stamp_promotions=stamp)
    async def body(h: Harness) -> None:
        chat_id = await h.create("first", script=Script((Say("one"), Wait(0.5))))
        watch = await AsyncWs.connect(h.server, f"{V2}/watch")
        ws = await h.stream(chat_id)
        queued = (await h.send(chat_id, "second")).json()
        assert queued["queued"] is True
        events = await ws.wait_status({"waiting"})
        assert statuses(events) == ["running", "waiting"], "no terminal status between turns"
        users = [m for m in messages_of(events) if m["role"] == "user"]
        promoted = users[-1]
        assert text_of(promoted) == "second"
        assert ("queued_message_id" in promoted) is stamp
        if stamp:
            assert promoted["queued_message_id"] == queued["queued_message"]["id"]
        queue_updates = [e for e in events if e["type"] == "queue_update"]
        assert queue_updates[-1].get("queued_messages", []) == []
        await watch.wait(lambda r: any(e["chat"]["status"] == "waiting" for e in r.watch_events()))
        changes = [e for e in watch.raw.watch_events() if e["kind"] == "status_change"]
        # The queued send, the promotion at turn end (still running), the final settle.
        assert [c["chat"]["status"] for c in changes] == ["running", "running", "waiting"]
        await ws.close()
        await watch.close()

    body()


@served(chunk_delay=0.002, interrupt_delay=0.5)
async def test_interrupt_and_busy_interrupt_over_the_wire(h: Harness) -> None:
    """Server-behaviour 8.3, 8.6, 8.7: interrupt returns ``interrupting`` at once
    (``?wait=true`` ignored), a second interrupt is 409, archive is 409 while active, then
    the partial answer is committed and the promoted prompt runs."""
    chat_id = await h.create("long", script=LONG)
    ws = await h.stream(chat_id)
    await ws.wait(lambda r: any(e["type"] == "message_part" for e in r.events()))
    h.server.config.scripts.push(Script((Wait(0.3), Say("second answer"))))
    queued = await h.send(chat_id, "instead", busy="interrupt")
    assert queued.json()["queued"] is True
    assert await h.status(chat_id) == "interrupting"
    second = await h.http.post(f"{V2}/{chat_id}/interrupt?wait=true")
    assert second.status_code == 409
    assert (await h.http.patch(f"{V2}/{chat_id}", json={"archived": True})).status_code == 409
    events = await ws.wait_status({"waiting"})
    assert statuses(events)[:3] == ["running", "interrupting", "running"]
    committed = messages_of(events)
    assert [m["role"] for m in committed][1:3] == ["assistant", "user"]
    assert text_of(committed[1]) == "partial "
    idle = await h.http.post(f"{V2}/{chat_id}/interrupt")
    assert (idle.status_code, idle.json()["message"]) == (
        409,
        "Chat is not in an interruptible state.",
    )
    assert (await h.http.patch(f"{V2}/{chat_id}", json={"archived": True})).status_code == 204
    archived = await h.send(chat_id, "x")
    assert archived.status_code == 400
    assert archived.json()["message"] == "Cannot send messages to an archived chat."
    assert (await h.http.patch(f"{V2}/{chat_id}", json={"archived": True})).json()[
        "message"
    ] == "Chat is already archived."
    await ws.close()


@served(chunk_delay=0.002)
async def test_queue_routes_over_the_wire(h: Harness) -> None:
    chat_id = await h.create("long", script=LONG)
    base = f"{V2}/{chat_id}/queue"
    assert (await h.http.delete(f"{base}/1")).status_code == 409
    ids = [(await h.send(chat_id, f"q{n}")).json()["queued_message"]["id"] for n in range(3)]
    assert (await h.http.delete(f"{base}/{ids[-1] + 50}")).status_code == 404
    assert (await h.http.delete(f"{base}/{ids[0]}")).status_code == 204
    page = (await h.http.get(f"{V2}/{chat_id}/messages")).json()
    assert [q["id"] for q in page["queued_messages"]] == ids[1:]
    ws = await h.stream(chat_id)
    await ws.wait(lambda r: bool(r.frames))
    update = next(e for e in ws.raw.events() if e["type"] == "queue_update")
    assert [q["id"] for q in update["queued_messages"]] == ids[1:]
    h.server.config.scripts.push(LONG)
    promoted = await h.http.post(f"{base}/{ids[2]}/promote")
    assert promoted.status_code == 202
    assert promoted.json() == {"message": "Queued message promotion accepted."}
    await ws.close()
    other = await h.create("long", script=LONG)
    for n in range(20):
        assert (await h.send(other, f"fill{n}")).status_code == 200
    full = await h.send(other, "overflow")
    assert full.status_code == 429
    assert full.json() == {
        "message": "Message queue is full.",
        "detail": "Maximum 20 messages can be queued.",
    }


@served(chunk_delay=0.001)
async def test_snapshot_order_while_paused_with_a_queue(h: Harness) -> None:
    """Server-behaviour 8.1/8.4: messages → queue_update → status → action_required →
    preview_reset, re-sent on every connect while paused."""
    chat_id = await h.create("weather", script=TOOL, unsafe_dynamic_tools=[WEATHER_TOOL])
    await h.wait_status(chat_id, {"requires_action"})
    assert (await h.send(chat_id, "queued")).json()["queued"] is True
    for _ in range(2):
        ws = await h.stream(chat_id)
        await ws.wait(lambda r: any(e["type"] == "preview_reset" for e in r.events()))
        kinds = [k for k in types(ws.raw.events()) if k != "message"]
        assert kinds == [
            "queue_update",
            "status:requires_action",
            "action_required",
            "preview_reset",
        ]
        await ws.close()


@served(requires_action_timeout=0.3, chunk_delay=0.001)
async def test_requires_action_deadline_resumes_with_cancellations(h: Harness) -> None:
    chat_id = await h.create("weather", script=TOOL, unsafe_dynamic_tools=[WEATHER_TOOL])
    ws = await h.stream(chat_id)
    events = await ws.wait_status({"waiting"})
    assert statuses(events) == ["running", "requires_action", "running", "waiting"]
    tool = next(m for m in messages_of(events) if m["role"] == "tool")
    assert tool["content"][0]["is_error"] is True
    await ws.close()


@served(chunk_delay=0.001, retry_base_delay=0.2)
async def test_retry_events_then_error(h: Harness) -> None:
    script = Script(
        (Wait(0.3), Say("x"), Retry(times=1), Fail(message="nope", kind="generic", retries=1))
    )
    chat_id = await h.create("go", script=script)
    ws = await h.stream(chat_id)
    events = await ws.wait(lambda r: any(e["type"] == "error" for e in r.events()))
    kinds = types(events.events())
    assert kinds.count("retry") == 2
    assert kinds[-2:] == ["status:error", "error"]
    chat = (await h.http.get(f"{V2}/{chat_id}")).json()
    assert chat["last_error"]["message"] == "nope"
    await h.send(chat_id, "again")
    assert "last_error" not in (await h.http.get(f"{V2}/{chat_id}")).json()
    await ws.close()


@served(chunk_delay=0.0)
async def test_frames_never_exceed_256_events(h: Harness) -> None:
    chat_id = await h.create("big", script=Script((Wait(0.5), Say("w " * 700))))
    ws = await h.stream(chat_id)
    events = await ws.wait_status({"waiting"})
    assert sum(1 for e in events if e["type"] == "message_part") == 700
    assert max(len(json.loads(f)) for f in ws.raw.frames) == 256
    await ws.close()


@served()
async def test_history_reset_after_an_edit(h: Harness) -> None:
    chat_id = await h.create("first")
    await h.wait_status(chat_id, {"waiting"})
    user = (await h.http.get(f"{V2}/{chat_id}/messages?limit=200")).json()["messages"][-1]
    edited = await h.http.patch(
        f"{V2}/{chat_id}/messages/{user['id']}",
        json={"content": [{"type": "text", "text": "edited"}]},
    )
    assert edited.status_code == 200
    ws = await h.stream(chat_id, after_id=10**9)
    await ws.wait(lambda r: bool(r.frames))
    events = ws.raw.events()
    assert events[0]["type"] == "history_reset"
    assert text_of(messages_of(events)[0]) == "edited"
    await ws.close()


@served(ping_interval=0.05, ping_timeout=0.1)
async def test_pings_data_frames_and_ping_timeouts(h: Harness) -> None:
    """Control-frame pings every ``ping_interval``; a client data frame closes with 1008
    (the server never reads); a missing pong closes with 1001 "Ping failed"."""
    chat_id = await h.create()
    ws = await h.stream(chat_id)
    await ws.wait(lambda r: r.pings >= 2)
    ws.raw.send_text("hello?")
    await ws.flush()
    await ws.wait_end()
    assert ws.raw.close_code == 1008
    await ws.close()
    silent = await AsyncWs.connect(h.server, f"{V2}/{chat_id}/stream")
    silent.raw.answer_pings = False
    await silent.wait_end()
    assert (silent.raw.close_code, silent.raw.close_reason) == (1001, "Ping failed")
    await silent.close()


@served(chunk_delay=0.01)
async def test_injected_drops_and_rejections(h: Harness) -> None:
    chat_id = await h.create("x", script=Script((Say("a b c d e f g"),)))
    h.server.faults.drop_stream_after_frames(1)
    dropped = await h.stream(chat_id)
    await dropped.wait_end()
    assert dropped.raw.close_code is None, "closed without a close frame or final event"
    assert len(dropped.raw.frames) == 1
    await dropped.close()
    h.server.faults.drop_stream_after_frames(1, close_code=1011)
    coded = await h.stream(chat_id)
    await coded.wait_end()
    assert coded.raw.close_code == 1011
    await coded.close()
    h.server.faults.reject_upgrades(503, times=2)
    for _ in range(2):
        rejected = await h.stream(chat_id)
        assert rejected.raw.reject_status == 503
        await rejected.close()
    accepted = await h.stream(chat_id)
    assert accepted.raw.accepted is True
    await accepted.close()
    assert h.server.counters.stream_dials[chat_id] == 5
    h.server.faults.fail_requests("get_chat", 500, times=1)
    assert (await h.http.get(f"{V2}/{chat_id}")).status_code == 500
    assert (await h.http.get(f"{V2}/{chat_id}")).status_code == 200
    h.server.faults.delay_requests("get_chat", 0.02, times=1)
    assert (await h.http.get(f"{V2}/{chat_id}")).status_code == 200


@served()
async def test_capacity_stall_reports_queued_for_capacity(h: Harness) -> None:
    h.server.faults.stall_runs(0.3)
    chat_id = await h.create("x")
    chat = (await h.http.get(f"{V2}/{chat_id}")).json()
    assert chat["status"] == "running" and chat["queued_for_capacity"] is True
    await h.wait_status(chat_id, {"waiting"})


@served()
async def test_uploads_over_the_wire(h: Harness) -> None:
    org = h.server.organization_id
    headers = {"Content-Type": "text/plain", "Content-Disposition": 'attachment; filename="a.txt"'}
    ok = await h.http.post(f"{V2}/files?organization={org}", content=b"hello", headers=headers)
    assert ok.status_code == 201
    got = await h.http.get(f"{V2}/files/{ok.json()['id']}")
    assert (got.content, got.headers["content-type"]) == (b"hello", "text/plain")
    big = await h.http.post(
        f"{V2}/files?organization={org}", content=b"x" * (10 * 1024 * 1024 + 1), headers=headers
    )
    assert big.status_code == 413
    assert big.json()["message"] == "File too large."


@served()
async def test_keep_alive_and_connection_counting(h: Harness) -> None:
    for _ in range(5):
        assert (await h.http.get(V2)).status_code == 200
    assert h.server.counters.total_connections == 1, "httpx reuses one keep-alive connection"
    assert h.server.open_connections == 1
    chat_id = await h.create()
    ws = await h.stream(chat_id)
    assert h.server.open_websockets == 1
    assert h.server.counters.open_streams == 1
    await ws.close()


@served()
async def test_bad_handshakes_and_garbage(h: Harness) -> None:
    chat_id = await h.create()
    reader, writer = await asyncio.open_connection(h.server.host, h.server.port)
    writer.write(
        f"GET {V2}/{chat_id}/stream HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        f"Coder-Session-Token: {h.server.token}\r\n\r\n".encode()
    )
    response = await reader.read(65536)
    assert response.startswith(b"HTTP/1.1 400")
    writer.close()
    reader, writer = await asyncio.open_connection(h.server.host, h.server.port)
    writer.write(b"NOT HTTP AT ALL\r\n\r\n")
    assert (await reader.read(65536)).startswith(b"HTTP/1.1 400")
    writer.close()
    reader, writer = await asyncio.open_connection(h.server.host, h.server.port)
    writer.close()
