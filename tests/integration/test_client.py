"""``CoderChatClient`` on every runtime against the fake server over loopback (the same test
bodies on asyncio, trio and blocking): every operation of wire 2 and its error statuses,
prefix negotiation on a legacy-only server (wire 1.4), uploads (wire 7, D20), model listing
and hints (wire 8, D16), ``interrupt_chat(wait=True)`` (D11), workspace helpers (wire 9),
construction (wire 1.1; D23) and the token never leaking (docs/architecture.md rule 6; every test also gets
the conftest's leak check over events, results, errors and logs).
"""

from __future__ import annotations

import io
import logging
import socket
from pathlib import Path
from typing import Any

import httpx
import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto import (
    CoderAgentError,
    CoderApiError,
    CreateChatRequest,
    DynamicTool,
    FileInput,
    TextInput,
)
from coder_proto._actions import ToolOutcome
from coder_proto.fake import CallClientTool, Say, Script, Wait

from .conftest import MakeServer

V2 = "/api/v2/chats"
LEGACY = "/api/experimental/chats"
UNKNOWN = "00000000-0000-4000-8000-000000000000"
WEATHER = DynamicTool(
    name="get_weather",
    description="Get the weather.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture
def server(make_server: MakeServer) -> FakeCoderServer:
    fake = make_server()
    fake.config.scripts.add("weather", Script([CallClientTool(name="get_weather"), Say("ok")]))
    fake.config.scripts.add("slow", Script([Say("partial"), Wait(30.0), Say("rest")]))
    return fake


async def wait_status(rt: Any, client: Any, chat_id: str, wanted: set[str]) -> str:
    statuses: list[str] = []

    async def probe() -> bool:
        statuses.append((await rt.call(client, "get_chat", chat_id)).status)
        return statuses[-1] in wanted

    for _ in range(500):
        if await probe():
            return statuses[-1]
        await rt.sleep(0.01)
    raise AssertionError(f"chat stayed {statuses[-1]}")


def ops(events: list[Any]) -> list[str]:
    return [e.op for e in events if e.type == "http:request"]


# -- construction (wire 1.1; D23) -----------------------------------------------------------------


def test_settings_default_from_the_environment_wire_1_1(
    runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODER_URL", "https://env.example/")
    monkeypatch.setenv("CODER_SESSION_TOKEN", "env-secret-token")

    async def scenario(rt: Any) -> None:
        client = rt.adapter.CoderChatClient()
        assert client.base_url == "https://env.example"
        assert client.settings.token == "env-secret-token"
        explicit = rt.adapter.CoderChatClient("https://explicit.example", "explicit-token")
        assert (explicit.base_url, explicit.settings.token) == (
            "https://explicit.example",
            "explicit-token",
        )
        assert "env-secret-token" not in repr(client) and "env.example" in repr(client)
        await rt.close_client(client)
        await rt.close_client(explicit)

    runtime.run(scenario)


def test_missing_settings_raise_a_clear_error(
    runtime: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CODER_URL", raising=False)
    monkeypatch.delenv("CODER_SESSION_TOKEN", raising=False)
    with pytest.raises(CoderAgentError, match="CODER_URL"):
        runtime.adapter.CoderChatClient()
    with pytest.raises(CoderAgentError, match="CODER_SESSION_TOKEN"):
        runtime.adapter.CoderChatClient("https://coder.example")


def test_closing_closes_the_created_http_client_but_never_a_supplied_one_d23(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        own = await rt.client(server)
        await rt.call(own, "list_chats")
        await rt.close_client(own)
        assert own.driver.http_client.is_closed
        supplied = rt.http_client()
        client = await rt.client(server, http_client=supplied)
        await rt.call(client, "list_chats")
        await rt.close_client(client)
        assert not supplied.is_closed
        await rt.close_http(supplied)
        assert await rt.idle(server)

    runtime.run(scenario)


def test_a_supplied_client_sends_its_own_headers_through_its_transport_d23(
    runtime: Any, server: FakeCoderServer
) -> None:
    seen: list[httpx.Request] = []

    async def scenario(rt: Any) -> None:
        supplied = rt.http_client(headers={"X-Tenant": "t1"}, on_request=seen.append)
        client = await rt.client(server, http_client=supplied)
        chat = await rt.call(
            client, "create_chat", organization_id=server.organization_id, content="hi"
        )
        assert chat.organization_id == server.organization_id
        await rt.close_client(client)
        await rt.close_http(supplied)

    runtime.run(scenario)
    assert [r.headers["X-Tenant"] for r in seen] == ["t1"]
    assert seen[0].headers["Content-Type"] == "application/json"


# -- chats and messages (wire 2) ------------------------------------------------------------------


def test_create_get_list_update_and_messages_wire_2(runtime: Any, server: FakeCoderServer) -> None:
    events: list[Any] = []

    async def scenario(rt: Any) -> None:
        client = await rt.client(server, on_transport_event=events.append)
        org = server.organization_id
        chat = await rt.call(
            client, "create_chat", organization_id=org, content="hello", system_prompt="brief"
        )
        same = await rt.call(
            client,
            "create_chat",
            CreateChatRequest(organization_id=org, content=(TextInput("x"),)),
        )
        assert chat.id != same.id
        assert (await rt.call(client, "get_chat", chat.id)).id == chat.id
        await wait_status(rt, client, chat.id, {"waiting"})
        await rt.call(client, "update_chat", chat.id, title="Renamed")
        assert (await rt.call(client, "get_chat", chat.id)).title == "Renamed"
        listed = await rt.call(client, "list_chats")
        assert {c.id for c in listed} >= {chat.id, same.id}
        sent = await rt.call(
            client, "create_chat_message", chat.id, content=["second", TextInput("part")]
        )
        assert sent.message is not None and not sent.queued
        await wait_status(rt, client, chat.id, {"waiting"})
        page = await rt.call(client, "get_messages", chat.id)
        ids = [m.id for m in page.messages]
        assert ids == sorted(ids, reverse=True)  # newest first without cursors
        older = await rt.call(client, "get_messages", chat.id, after_id=ids[-1], limit=2)
        assert [m.id for m in older.messages] == sorted(ids)[1:3]  # ascending with after_id
        await rt.close_client(client)
        assert await rt.idle(server)

    runtime.run(scenario)
    assert ops(events)[:4] == ["create_chat", "create_chat", "get_chat", "get_chat"]
    assert {"update_chat", "list_chats", "create_chat_message", "get_messages"} <= set(ops(events))


def test_submit_tool_results_resumes_a_paused_chat_d5(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> str:
        client = await rt.client(server)
        chat = await rt.call(
            client,
            "create_chat",
            organization_id=server.organization_id,
            content="weather?",
            tools=[WEATHER],
        )
        await wait_status(rt, client, chat.id, {"requires_action"})
        page = await rt.call(client, "get_messages", chat.id, limit=1)
        (call,) = [p for p in page.messages[0].content if p.type == "tool-call"]
        outcome = ToolOutcome(tool_call_id=call.tool_call_id, output={"ok": True})
        await rt.call(client, "submit_tool_results", chat.id, [outcome])
        status = await wait_status(rt, client, chat.id, {"waiting"})
        await rt.close_client(client)
        return status

    assert runtime.run(scenario) == "waiting"


def test_interrupt_with_wait_polls_until_settled_d11(runtime: Any, server: FakeCoderServer) -> None:
    events: list[Any] = []

    async def scenario(rt: Any) -> str:
        client = await rt.client(server, on_transport_event=events.append)
        org = server.organization_id
        chat = await rt.call(client, "create_chat", organization_id=org, content="slow")
        await wait_status(rt, client, chat.id, {"running"})
        settled = await rt.call(client, "interrupt_chat", chat.id, wait=True, timeout=5.0)
        assert settled.status in {"waiting", "error", "completed"}
        await rt.close_client(client)
        return str(chat.id)

    chat_id = runtime.run(scenario)
    paths = [e.path for e in events if e.type == "http:request" and e.op == "interrupt_chat"]
    assert paths == [f"{V2}/{chat_id}/interrupt?wait=true"]


def test_interrupting_an_idle_chat_is_a_409(runtime: Any, server: FakeCoderServer) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        org = server.organization_id
        chat = await rt.call(client, "create_chat", organization_id=org, content="hi")
        await wait_status(rt, client, chat.id, {"waiting"})
        with pytest.raises(CoderApiError) as info:
            await rt.call(client, "interrupt_chat", chat.id)
        assert info.value.status == 409 and info.value.chat_id == chat.id
        await rt.close_client(client)

    runtime.run(scenario)


def test_delete_queued_message_and_its_404_d9(runtime: Any, server: FakeCoderServer) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        org = server.organization_id
        chat = await rt.call(client, "create_chat", organization_id=org, content="slow")
        await wait_status(rt, client, chat.id, {"running"})
        sent = await rt.call(
            client, "create_chat_message", chat.id, content="later", busy_behavior="queue"
        )
        assert sent.queued and sent.queued_message is not None
        entry = sent.queued_message.id
        await rt.call(client, "delete_queued_message", chat.id, entry)
        assert (await rt.call(client, "get_messages", chat.id)).queued_messages == ()
        with pytest.raises(CoderApiError) as info:
            await rt.call(client, "delete_queued_message", chat.id, entry)
        assert info.value.status in (404, 409)
        await rt.call(client, "interrupt_chat", chat.id, wait=True)
        await rt.close_client(client)

    runtime.run(scenario)


def test_a_full_queue_is_a_retryable_429_d21(runtime: Any, server: FakeCoderServer) -> None:
    server.faults.fail_requests("create_chat_message", 429, message="Message queue is full.")

    async def scenario(rt: Any) -> CoderApiError:
        client = await rt.client(server)
        org = server.organization_id
        chat = await rt.call(client, "create_chat", organization_id=org, content="hi")
        try:
            with pytest.raises(CoderApiError) as info:
                await rt.call(client, "create_chat_message", chat.id, content="more")
        finally:
            await rt.close_client(client)
        return info.value

    error = runtime.run(scenario)
    assert error.status == 429 and error.retryable
    assert "Message queue is full." in str(error)


def test_archive_is_idempotent_and_409_while_active_d10(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        org = server.organization_id
        busy = await rt.call(client, "create_chat", organization_id=org, content="slow")
        await wait_status(rt, client, busy.id, {"running"})
        with pytest.raises(CoderApiError) as info:
            await rt.call(client, "archive_chat", busy.id)
        assert info.value.status == 409
        await rt.call(client, "interrupt_chat", busy.id, wait=True)
        assert await rt.call(client, "archive_chat", busy.id) == "archived"
        assert await rt.call(client, "archive_chat", busy.id) == "already_archived"
        assert (await rt.call(client, "get_chat", busy.id)).archived
        await rt.close_client(client)

    runtime.run(scenario)


def test_unknown_chat_is_a_404_naming_the_v2_path(runtime: Any, server: FakeCoderServer) -> None:
    async def scenario(rt: Any) -> CoderApiError:
        client = await rt.client(server)
        await rt.call(client, "list_chats")
        with pytest.raises(CoderApiError) as info:
            await rt.call(client, "get_chat", UNKNOWN)
        await rt.close_client(client)
        return info.value

    error = runtime.run(scenario)
    assert (error.status, error.method, error.path) == (404, "GET", f"{V2}/{UNKNOWN}")
    assert not error.retryable


def test_a_bad_token_is_a_401_that_locks_the_prefix_wire_1_4(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        client = rt.adapter.CoderChatClient(server.url, "wrong-token")
        with pytest.raises(CoderApiError) as info:
            await rt.call(client, "list_chats")
        assert info.value.status == 401
        # A 401 from v2 proves the route exists: the prefix locks to v2.
        assert client.prefix == V2
        await rt.close_client(client)

    runtime.run(scenario)


def test_get_chat_cost_is_a_plain_operation_d17(runtime: Any, server: FakeCoderServer) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        org = server.organization_id
        chat = await rt.call(client, "create_chat", organization_id=org, content="hi")
        await wait_status(rt, client, chat.id, {"waiting"})
        cost = await rt.call(client, "get_chat_cost", chat.id)
        assert cost.chat_id == chat.id and cost.request_count is not None
        await rt.close_client(client)

    runtime.run(scenario)


# -- prefix negotiation on a legacy-only server (wire 1.4) -----------------------------------------


def test_a_legacy_only_server_locks_the_experimental_prefix_for_good_wire_1_4(
    runtime: Any, make_server: MakeServer
) -> None:
    server = make_server(legacy_only=True)
    events: list[Any] = []

    async def scenario(rt: Any) -> tuple[str, CoderApiError]:
        client = await rt.client(server, on_transport_event=events.append)
        org = server.organization_id
        chat = await rt.call(client, "create_chat", organization_id=org, content="hi")
        assert client.prefix == LEGACY
        await rt.call(client, "get_chat", chat.id)
        with pytest.raises(CoderApiError) as info:
            await rt.call(client, "get_chat", UNKNOWN)
        assert client.prefix == LEGACY
        await rt.close_client(client)
        return chat.id, info.value

    chat_id, error = runtime.run(scenario)
    requests = [(e.op, e.path) for e in events if e.type == "http:request"]
    assert requests[:2] == [("create_chat", V2), ("create_chat", LEGACY)]
    # Locked: one attempt per call, even for a 404 (never renegotiated).
    assert requests[2:] == [
        ("get_chat", f"{LEGACY}/{chat_id}"),
        ("get_chat", f"{LEGACY}/{UNKNOWN}"),
    ]
    assert error.path.startswith(LEGACY)


def test_model_listing_falls_back_to_the_legacy_route_without_touching_the_prefix_d16(
    runtime: Any, make_server: MakeServer
) -> None:
    server = make_server(legacy_only=True)
    events: list[Any] = []

    async def scenario(rt: Any) -> None:
        client = await rt.client(server, on_transport_event=events.append)
        org = server.organization_id
        configs = await rt.call(client, "list_model_configs", org)
        assert [c.model for c in configs] == ["claude-sonnet-4-6", "gpt-5", "claude-opus-legacy"]
        assert client.prefix is None
        gpt = next(c.id for c in configs if c.model == "gpt-5")
        assert await rt.call(client, "resolve_model_config_id", "gpt-5", org) == gpt
        await rt.close_client(client)

    runtime.run(scenario)
    org_route = f"/api/v2/organizations/{server.organization_id}/chats/models"
    legacy = "/api/experimental/chats/model-configs"
    assert [(e.op, e.path) for e in events if e.type == "http:request"] == [
        ("list_model_configs", org_route),
        ("list_model_configs", legacy),
        ("resolve_model_config_id", org_route),
        ("resolve_model_config_id", legacy),
    ]


def test_model_listing_and_hints_on_a_current_server_wire_8(
    runtime: Any, server: FakeCoderServer
) -> None:
    events: list[Any] = []

    async def scenario(rt: Any) -> None:
        client = await rt.client(server, on_transport_event=events.append)
        org = server.organization_id
        configs = await rt.call(client, "list_model_configs", org)
        by_model = {c.model: c for c in configs}
        assert by_model["claude-sonnet-4-6"].provider == "anthropic"
        sonnet = by_model["claude-sonnet-4-6"].id
        hint = "resolve_model_config_id"
        assert await rt.call(client, hint, "anthropic:claude-sonnet-4-6", org) == sonnet
        assert await rt.call(client, hint, "GPT-5", org) == by_model["gpt-5"].id
        assert await rt.call(client, hint, "Sonnet 4.6", org) == sonnet
        assert await rt.call(client, hint, "no-such-model", org) is None
        uuid = "7b9c0d1e-2f3a-4b5c-8d6e-7f8091a2b3c4"
        assert await rt.call(client, hint, uuid, org) == uuid  # no request
        await rt.close_client(client)

    runtime.run(scenario)
    assert ops(events) == ["list_model_configs"] + ["resolve_model_config_id"] * 4


# -- uploads (wire 7, D20) -------------------------------------------------------------------------


def test_upload_round_trip_with_a_non_ascii_name_d20(runtime: Any, server: FakeCoderServer) -> None:
    seen: list[httpx.Request] = []

    async def scenario(rt: Any) -> None:
        supplied = rt.http_client(on_request=seen.append)
        client = await rt.client(server, http_client=supplied)
        org = server.organization_id
        file_id = await rt.call(
            client, "upload_chat_file", org, b"# Notes\n", filename="ünïcødé notes.md"
        )
        downloaded = await rt.call(client, "get_chat_file", file_id)
        chat = await rt.call(
            client, "create_chat", organization_id=org, content=["see file", FileInput(file_id)]
        )
        assert chat.id
        await rt.close_client(client)
        await rt.close_http(supplied)
        assert downloaded.data == b"# Notes\n"
        assert downloaded.media_type.startswith("text/markdown")

    runtime.run(scenario)
    upload = seen[0]
    assert upload.url.path == f"{V2}/files"
    assert upload.url.params["organization"] == server.organization_id
    assert upload.headers["Content-Type"] == "text/markdown"
    assert upload.headers["Content-Disposition"] == (
        'attachment; filename="_n_c_d_ notes.md"; '
        "filename*=UTF-8''%C3%BCn%C3%AFc%C3%B8d%C3%A9%20notes.md"
    )


def test_uploads_from_a_path_and_a_file_object_wire_7(
    runtime: Any, server: FakeCoderServer, tmp_path: Path
) -> None:
    path = tmp_path / "data.json"
    path.write_bytes(b'{"a": 1}')

    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        org = server.organization_id
        from_path = await rt.call(client, "upload_chat_file", org, path)
        from_object = await rt.call(
            client, "upload_chat_file", org, io.BytesIO(b"a,b\n"), filename="t.csv"
        )
        assert (await rt.call(client, "get_chat_file", from_path)).data == b'{"a": 1}'
        csv = await rt.call(client, "get_chat_file", from_object)
        assert csv.data == b"a,b\n" and csv.media_type.startswith("text/csv")
        await rt.close_client(client)

    runtime.run(scenario)


def test_refused_uploads_never_reach_the_server_wire_7(
    runtime: Any, server: FakeCoderServer, tmp_path: Path
) -> None:
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * (10 * 1024 * 1024 + 1))

    class Text:
        name = "t.csv"

        def read(self) -> str:
            return "a,b"

    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        org = server.organization_id
        upload = "upload_chat_file"
        with pytest.raises(CoderAgentError, match='"application/zip" is not allowed'):
            await rt.call(
                client, upload, org, b"PK", filename="a.zip", media_type="application/zip"
            )
        with pytest.raises(CoderAgentError, match="over the 10485760-byte"):
            await rt.call(client, upload, org, big)
        with pytest.raises(CoderAgentError, match="over the 10485760-byte"):
            await rt.call(
                client, upload, org, b"x" * (10 * 1024 * 1024 + 1), media_type="text/plain"
            )
        with pytest.raises(CoderAgentError, match="Could not determine"):
            await rt.call(client, upload, org, b"x")
        with pytest.raises(CoderAgentError, match=r'File type "\.zip" of "a\.zip" is not accepted'):
            await rt.call(client, upload, org, b"PK", filename="a.zip")
        with pytest.raises(CoderAgentError, match="cannot read"):
            await rt.call(client, upload, org, tmp_path / "missing.txt")
        with pytest.raises(CoderAgentError, match="binary mode"):
            await rt.call(client, upload, org, Text())
        await rt.close_client(client)

    runtime.run(scenario)
    assert server.counters.requests["upload_chat_file"] == 0


# -- workspaces (wire 9) -------------------------------------------------------------------------


def workspace_transport(calls: list[str]) -> httpx.MockTransport:
    def handler(request: httpx.Request) -> httpx.Response:
        calls.append(f"{request.method} {request.url.path}")
        assert request.headers["Coder-Session-Token"] == "ws-token"
        if request.url.path == "/api/v2/workspaces/ws-1":
            return httpx.Response(
                200,
                json={
                    "id": "ws-1",
                    "name": "dev",
                    "owner_name": "alice",
                    "latest_build": {"resources": [{"agents": [{"name": "main"}]}]},
                },
            )
        if request.url.path == "/api/v2/applications/host":
            return httpx.Response(200, json={"host": "*.apps.example.com"})
        if request.url.path == "/api/v2/workspaces/ws-1/port-share":
            return httpx.Response(200, json={"share_level": "authenticated"})
        return httpx.Response(404, json={"message": "not found"})

    return httpx.MockTransport(handler)


def test_preview_and_share_use_v2_workspace_apis_without_events_wire_9(runtime: Any) -> None:
    calls: list[str] = []
    events: list[Any] = []

    async def scenario(rt: Any) -> Any:
        supplied = rt.http_client(transport=workspace_transport(calls))
        client = rt.adapter.CoderChatClient(
            "https://coder.example",
            "ws-token",
            http_client=supplied,
            on_transport_event=events.append,
        )
        preview = await rt.call(client, "preview_url", "ws-1", 3000)
        shared = await rt.call(client, "share_port", "ws-1", 3000)
        await rt.close_client(client)
        await rt.close_http(supplied)
        assert client.prefix is None
        return preview, shared

    preview, shared = runtime.run(scenario)
    assert preview.url == "https://3000--main--dev--alice.apps.example.com"
    assert preview.share_level is None and shared.share_level == "authenticated"
    assert sorted(calls[:2]) == ["GET /api/v2/applications/host", "GET /api/v2/workspaces/ws-1"]
    assert calls[-1] == "POST /api/v2/workspaces/ws-1/port-share"
    assert events == []


# -- secrets (docs/architecture.md rule 6) ----------------------------------------------------------


def test_the_token_never_appears_in_reprs_errors_logs_or_events(
    runtime: Any, server: FakeCoderServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    events: list[Any] = []
    seen: list[str] = []
    token = server.token

    async def scenario(rt: Any) -> None:
        client = await rt.client(server, on_transport_event=events.append)
        seen.extend([repr(client), repr(client.settings), repr(client.driver)])
        org = server.organization_id
        chat = await rt.call(client, "create_chat", organization_id=org, content="weather")
        await wait_status(rt, client, chat.id, {"requires_action"})
        for name, args in (
            ("get_chat", (UNKNOWN,)),
            ("interrupt_chat", (UNKNOWN,)),
        ):
            with pytest.raises(CoderAgentError) as info:
                await rt.call(client, name, *args)
            seen.extend([str(info.value), repr(info.value)])
        with pytest.raises(CoderAgentError) as refused:
            await rt.call(client, "upload_chat_file", org, b"x", media_type="image/tiff")
        seen.extend([str(refused.value), repr(refused.value)])
        watch = await rt.enter(client.watch_chats())
        seen.append(repr(watch))
        await rt.leave(watch)
        await rt.call(client, "interrupt_chat", chat.id, wait=True, last_status="requires_action")
        await rt.close_client(client)

    runtime.run(scenario)
    seen.extend(repr(e) for e in events)
    seen.extend(record.getMessage() for record in caplog.records)
    assert events and caplog.records
    assert not [text for text in seen if token in text]
    with pytest.raises(CoderAgentError) as refused:
        runtime.adapter.CoderChatClient(server.url, token + "\n")
    assert token not in str(refused.value)


def test_a_short_token_is_redacted_without_mangling_the_error_rule_6(runtime: Any) -> None:
    # A one-letter token must not cut letters out of the words of an error message.
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]

    async def scenario(rt: Any) -> str:
        client = rt.client_class(f"http://127.0.0.1:{port}", "t")
        try:
            with pytest.raises(CoderAgentError) as failed:
                await rt.call(client, "get_chat", UNKNOWN)
        finally:
            await rt.close_client(client)
        return str(failed.value)

    message = runtime.run(scenario)
    assert "ConnectError" in message or "ConnectionRefusedError" in message, message
    assert "<redacted>" not in message and "Connec<" not in message


def test_an_http_client_of_the_wrong_kind_is_refused_by_name(runtime: Any) -> None:
    # Each adapter names the httpx client class it needs, before any request.
    wanted = "httpx.Client" if runtime.name == "sync" else "httpx.AsyncClient"
    wrong = httpx.AsyncClient() if runtime.name == "sync" else httpx.Client()
    try:
        for given in (wrong, object()):
            with pytest.raises(CoderAgentError) as refused:
                runtime.client_class("http://127.0.0.1:9", "tok", http_client=given)
            assert f"http_client must be an {wanted}" in str(refused.value)
            assert type(given).__name__ in str(refused.value)
    finally:
        if isinstance(wrong, httpx.Client):
            wrong.close()
