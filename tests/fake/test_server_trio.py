"""The served fake from trio: the threaded server (``with FakeCoderServer()``) driven by
``httpx.AsyncClient`` on trio and trio sockets + wsproto; faults set from trio directly and
through ``trio.to_thread``."""

from __future__ import annotations

import functools
from collections.abc import Awaitable, Callable
from typing import Any

import httpx
import trio

from coder_integrations.fake_server import FakeCoderServer
from coder_proto.fake import CallClientTool, Say, Script, Wait

from .netclients import TrioWs
from .support import V2, WEATHER_TOOL, messages_of, statuses, text_of, types


def run(fn: Callable[..., Awaitable[None]]) -> Callable[..., None]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> None:
        trio.run(functools.partial(fn, *args, **kwargs))

    return wrapper


async def create(
    http: httpx.AsyncClient, server: FakeCoderServer, text: str = "hello", **fields: Any
) -> str:
    body = {
        "organization_id": server.organization_id,
        "content": [{"type": "text", "text": text}],
        **fields,
    }
    response = await http.post(V2, json=body)
    assert response.status_code == 201, response.text
    return str(response.json()["id"])


def client(server: FakeCoderServer) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        base_url=server.url, headers={"Coder-Session-Token": server.token}, verify=False
    )


@run
async def test_a_client_tool_turn_from_trio() -> None:
    script = Script(
        (
            Wait(0.2),
            CallClientTool(name="get_weather", args={"city": "Lima"}),
            Wait(0.3),
            Say("{tool_result}"),
        )
    )
    with FakeCoderServer(chunk_delay=0.001) as server:
        async with client(server) as http:
            server.config.scripts.push(script)
            chat_id = await create(http, server, "weather", unsafe_dynamic_tools=[WEATHER_TOOL])
            ws = await TrioWs.connect(server, f"{V2}/{chat_id}/stream")
            await ws.wait(lambda r: any(e["type"] == "action_required" for e in r.events()))
            kinds = types(ws.raw.events())
            assert kinds.index("status:requires_action") < kinds.index("action_required")
            call = next(e for e in ws.raw.events() if e["type"] == "action_required")
            call_id = call["action_required"]["tool_calls"][0]["tool_call_id"]
            response = await http.post(
                f"{V2}/{chat_id}/tool-results",
                json={"results": [{"tool_call_id": call_id, "output": 14}]},
            )
            assert response.status_code == 204
            events = await ws.wait_status({"waiting"})
            assert statuses(events) == ["running", "requires_action", "running", "waiting"]
            assert text_of(messages_of(events)[-1]) == "14"
            await ws.close()
        assert await trio.to_thread.run_sync(server.wait_idle, 5.0)


@run
async def test_fault_injection_from_trio() -> None:
    """Rejections and drops set from the trio thread and from a worker thread."""
    with FakeCoderServer(chunk_delay=0.01) as server:
        async with client(server) as http:
            server.config.scripts.push(Script((Wait(0.3), Say("a b c d e"))))
            chat_id = await create(http, server)
            server.faults.reject_upgrades(429, times=1)
            rejected = await TrioWs.connect(server, f"{V2}/{chat_id}/stream")
            assert rejected.raw.reject_status == 429
            await rejected.close()
            await trio.to_thread.run_sync(
                lambda: server.faults.drop_stream_at("message_part", occurrence=2)
            )
            dropped = await TrioWs.connect(server, f"{V2}/{chat_id}/stream")
            await dropped.wait_end()
            assert [
                e["message_part"]["seq"]
                for e in dropped.raw.events()
                if e["type"] == "message_part"
            ] == [1]
            assert dropped.raw.close_code is None
            await dropped.close()
            redial = await TrioWs.connect(server, f"{V2}/{chat_id}/stream")
            events = await redial.wait_status({"waiting"})
            assert text_of(messages_of(events)[-1]) == "a b c d e"
            await redial.close()
            server.faults.fail_requests("create_chat_message", 503, times=1)
            failed = await http.post(
                f"{V2}/{chat_id}/messages", json={"content": [{"type": "text", "text": "x"}]}
            )
            assert failed.status_code == 503
            assert server.counters.requests["create_chat_message"] == 1
        assert await trio.to_thread.run_sync(server.wait_idle, 5.0)
        assert server.counters.stream_dials[chat_id] == 3


@run
async def test_legacy_profile_from_trio() -> None:
    with FakeCoderServer(
        legacy_only=True, stamp_promotions=False, coordinates=False, chunk_delay=0.01
    ) as server:
        async with client(server) as http:
            assert (await http.get(V2)).status_code == 404
            body = {
                "organization_id": server.organization_id,
                "content": [{"type": "text", "text": "x"}],
            }
            server.config.scripts.push(Script((Wait(0.2), Say("one two"))))
            created = await http.post("/api/experimental/chats", json=body)
            chat_id = created.json()["id"]
            server.config.scripts.push(Script((Say("second"),)))
            queued = await http.post(
                f"/api/experimental/chats/{chat_id}/messages",
                json={"content": [{"type": "text", "text": "q"}]},
            )
            assert queued.json()["queued"] is True
            ws = await TrioWs.connect(server, f"/api/experimental/chats/{chat_id}/stream")
            events = await ws.wait(
                lambda r: len([m for m in messages_of(r.events()) if m["role"] == "assistant"]) >= 2
            )
            for event in events.events():
                if event["type"] == "message_part":
                    assert set(event["message_part"]) == {"role", "part"}, "D14 legacy profile"
            assert all("queued_message_id" not in m for m in messages_of(events.events()))
            await ws.close()
