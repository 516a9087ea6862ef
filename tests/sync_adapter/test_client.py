"""``CoderChatClient`` on the blocking adapter against the fake server over loopback: every operation of
wire 2 and its error statuses, prefix negotiation on a legacy-only server, uploads (wire 7,
D20), model listing and hints (wire 8, D16), ``interrupt_chat(wait=True)`` (D11), workspace
helpers (wire 9), construction (wire 1.1; D23) and the token never leaking (DESIGN rule 6).
"""

from __future__ import annotations

import io
import logging
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from coder_io_asyncio.fake_server import FakeCoderServer
from coder_io_sync import CoderChatClient
from coder_proto.actions import ToolOutcome
from coder_proto.errors import CoderAgentError, CoderApiError
from coder_proto.fake import CallClientTool, Say, Script, Wait
from coder_proto.wire.chats import (
    CreateChatRequest,
    DynamicTool,
    FileInput,
    TextInput,
)

V2 = "/api/v2/chats"
LEGACY = "/api/experimental/chats"
WEATHER = DynamicTool(
    name="get_weather",
    description="Get the weather.",
    input_schema={"type": "object", "properties": {"city": {"type": "string"}}},
)


@pytest.fixture
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0.001) as fake:
        fake.config.scripts.add("weather", Script([CallClientTool(name="get_weather"), Say("ok")]))
        fake.config.scripts.add("slow", Script([Say("partial"), Wait(30.0), Say("rest")]))
        yield fake


def client_for(server: FakeCoderServer, **kwargs: Any) -> CoderChatClient:
    return CoderChatClient(server.url, server.token, **kwargs)


def wait_status(
    client: CoderChatClient, chat_id: str, wanted: set[str], timeout: float = 5.0
) -> str:
    deadline = time.monotonic() + timeout
    while True:
        status = (client.get_chat(chat_id)).status
        if status in wanted:
            return status
        if time.monotonic() > deadline:
            raise AssertionError(f"chat stayed {status}")
        time.sleep(0.01)


def idle(server: FakeCoderServer) -> bool:
    return server.wait_idle(5.0)


# -- construction (wire 1.1; D23) -----------------------------------------------------------------


def test_settings_default_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CODER_URL", "https://env.example/")
    monkeypatch.setenv("CODER_SESSION_TOKEN", "env-secret-token")
    client = CoderChatClient()
    assert client.base_url == "https://env.example"
    assert client.settings.token == "env-secret-token"
    explicit = CoderChatClient("https://explicit.example", "explicit-token")
    assert (explicit.base_url, explicit.settings.token) == (
        "https://explicit.example",
        "explicit-token",
    )
    assert "env-secret-token" not in repr(client) and "env.example" in repr(client)
    client.close()
    explicit.close()


def test_missing_settings_raise_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("CODER_URL", raising=False)
    monkeypatch.delenv("CODER_SESSION_TOKEN", raising=False)
    with pytest.raises(CoderAgentError, match="CODER_URL"):
        CoderChatClient()
    with pytest.raises(CoderAgentError, match="CODER_SESSION_TOKEN"):
        CoderChatClient("https://coder.example")


def test_with_closes_the_created_http_client_but_never_a_supplied_one(
    server: FakeCoderServer,
) -> None:
    with client_for(server) as own:
        own.list_chats()
    assert own.driver.http_client.is_closed
    supplied = httpx.Client()
    with client_for(server, http_client=supplied) as client:
        client.list_chats()
    assert not supplied.is_closed
    supplied.close()
    assert idle(server)


def test_a_supplied_client_sends_its_own_headers_through_its_transport(
    server: FakeCoderServer,
) -> None:
    seen: list[httpx.Request] = []

    def hook(request: httpx.Request) -> None:
        seen.append(request)

    supplied = httpx.Client(headers={"X-Tenant": "t1"}, event_hooks={"request": [hook]})
    with client_for(server, http_client=supplied) as client:
        chat = client.create_chat(organization_id=server.organization_id, content="hi")
    assert chat.organization_id == server.organization_id
    assert [r.headers["X-Tenant"] for r in seen] == ["t1"]
    assert seen[0].headers["Content-Type"] == "application/json"
    supplied.close()


# -- chats and messages (wire 2) ------------------------------------------------------------------


def test_create_get_list_update_and_messages(server: FakeCoderServer) -> None:
    events: list[Any] = []
    with client_for(server, on_transport_event=events.append) as client:
        chat = client.create_chat(
            organization_id=server.organization_id, content="hello", system_prompt="be brief"
        )
        same = client.create_chat(
            CreateChatRequest(organization_id=server.organization_id, content=(TextInput("x"),))
        )
        assert chat.id != same.id
        assert (client.get_chat(chat.id)).id == chat.id
        wait_status(client, chat.id, {"waiting"})
        client.update_chat(chat.id, title="Renamed")
        assert (client.get_chat(chat.id)).title == "Renamed"
        listed = client.list_chats()
        assert {c.id for c in listed} >= {chat.id, same.id}
        sent = client.create_chat_message(chat.id, content=["second", TextInput("part")])
        assert sent.message is not None and not sent.queued
        wait_status(client, chat.id, {"waiting"})
        page = client.get_messages(chat.id)
        ids = [m.id for m in page.messages]
        assert ids == sorted(ids, reverse=True)  # newest first without cursors
        older = client.get_messages(chat.id, after_id=ids[-1], limit=2)
        assert [m.id for m in older.messages] == sorted(ids)[1:3]  # ascending with after_id
    ops = [e.op for e in events if e.type == "http:request"]
    assert ops[:4] == ["create_chat", "create_chat", "get_chat", "get_chat"]
    assert {"update_chat", "list_chats", "create_chat_message", "get_messages"} <= set(ops)
    assert idle(server)


def test_submit_tool_results_resumes_a_paused_chat(server: FakeCoderServer) -> None:
    with client_for(server) as client:
        chat = client.create_chat(
            organization_id=server.organization_id, content="weather?", tools=[WEATHER]
        )
        wait_status(client, chat.id, {"requires_action"})
        page = client.get_messages(chat.id, limit=1)
        (call,) = [p for p in page.messages[0].content if p.type == "tool-call"]
        client.submit_tool_results(
            chat.id, [ToolOutcome(tool_call_id=call.tool_call_id, output={"ok": True})]
        )
        assert wait_status(client, chat.id, {"waiting"}) == "waiting"


def test_interrupt_with_wait_polls_until_settled_d11(server: FakeCoderServer) -> None:
    events: list[Any] = []
    with client_for(server, on_transport_event=events.append) as client:
        chat = client.create_chat(organization_id=server.organization_id, content="slow")
        wait_status(client, chat.id, {"running"})
        settled = client.interrupt_chat(chat.id, wait=True, timeout=5.0)
        assert settled.status in {"waiting", "error", "completed"}
    paths = [e.path for e in events if e.type == "http:request" and e.op == "interrupt_chat"]
    assert paths == [f"{V2}/{chat.id}/interrupt?wait=true"]


def test_interrupting_an_idle_chat_is_a_409(server: FakeCoderServer) -> None:
    with client_for(server) as client:
        chat = client.create_chat(organization_id=server.organization_id, content="hi")
        wait_status(client, chat.id, {"waiting"})
        with pytest.raises(CoderApiError) as info:
            client.interrupt_chat(chat.id)
        assert info.value.status == 409 and info.value.chat_id == chat.id


def test_delete_queued_message_and_its_404(server: FakeCoderServer) -> None:
    with client_for(server) as client:
        chat = client.create_chat(organization_id=server.organization_id, content="slow")
        wait_status(client, chat.id, {"running"})
        sent = client.create_chat_message(chat.id, content="later", busy_behavior="queue")
        assert sent.queued and sent.queued_message is not None
        entry = sent.queued_message.id
        client.delete_queued_message(chat.id, entry)
        assert (client.get_messages(chat.id)).queued_messages == ()
        with pytest.raises(CoderApiError) as info:
            client.delete_queued_message(chat.id, entry)
        assert info.value.status in (404, 409)
        client.interrupt_chat(chat.id, wait=True)


def test_a_full_queue_is_a_retryable_429(server: FakeCoderServer) -> None:
    server.faults.fail_requests("create_chat_message", 429, message="Message queue is full.")
    with client_for(server) as client:
        chat = client.create_chat(organization_id=server.organization_id, content="hi")
        with pytest.raises(CoderApiError) as info:
            client.create_chat_message(chat.id, content="more")
    assert info.value.status == 429 and info.value.retryable
    assert "Message queue is full." in str(info.value)


def test_archive_is_idempotent_and_409_while_active_d10(server: FakeCoderServer) -> None:
    with client_for(server) as client:
        busy = client.create_chat(organization_id=server.organization_id, content="slow")
        wait_status(client, busy.id, {"running"})
        with pytest.raises(CoderApiError) as info:
            client.archive_chat(busy.id)
        assert info.value.status == 409
        client.interrupt_chat(busy.id, wait=True)
        assert client.archive_chat(busy.id) == "archived"
        assert client.archive_chat(busy.id) == "already_archived"
        assert (client.get_chat(busy.id)).archived


def test_unknown_chat_is_a_404_naming_the_v2_path(server: FakeCoderServer) -> None:
    with client_for(server) as client:
        client.list_chats()
        with pytest.raises(CoderApiError) as info:
            client.get_chat("00000000-0000-4000-8000-000000000000")
    error = info.value
    assert (error.status, error.method) == (404, "GET")
    assert error.path == f"{V2}/00000000-0000-4000-8000-000000000000"
    assert not error.retryable


def test_a_bad_token_is_a_401_that_does_not_lock_the_prefix_wire_1_4(
    server: FakeCoderServer,
) -> None:
    with CoderChatClient(server.url, "wrong-token") as client:
        with pytest.raises(CoderApiError) as info:
            client.list_chats()
        assert info.value.status == 401
        # A 401 from v2 proves the route exists: the prefix locks to v2.
        assert client.prefix == V2


def test_get_chat_cost_is_a_plain_operation_d17(server: FakeCoderServer) -> None:
    with client_for(server) as client:
        chat = client.create_chat(organization_id=server.organization_id, content="hi")
        wait_status(client, chat.id, {"waiting"})
        cost = client.get_chat_cost(chat.id)
    assert cost.chat_id == chat.id and cost.request_count is not None


# -- prefix negotiation on a legacy-only server (wire 1.4) -----------------------------------------


def test_a_legacy_only_server_locks_the_experimental_prefix_for_good() -> None:
    with FakeCoderServer(chunk_delay=0.001, legacy_only=True) as server:
        events: list[Any] = []
        with client_for(server, on_transport_event=events.append) as client:
            chat = client.create_chat(organization_id=server.organization_id, content="hi")
            assert client.prefix == LEGACY
            client.get_chat(chat.id)
            with pytest.raises(CoderApiError) as info:
                client.get_chat("00000000-0000-4000-8000-000000000000")
            assert client.prefix == LEGACY
        requests = [(e.op, e.path) for e in events if e.type == "http:request"]
        assert requests[:2] == [("create_chat", V2), ("create_chat", LEGACY)]
        # Locked: one attempt per call, even for a 404 (never renegotiated).
        assert requests[2:] == [
            ("get_chat", f"{LEGACY}/{chat.id}"),
            ("get_chat", f"{LEGACY}/00000000-0000-4000-8000-000000000000"),
        ]
        assert info.value.path.startswith(LEGACY)


def test_model_listing_falls_back_to_the_legacy_route_without_touching_the_prefix_d16() -> None:
    with FakeCoderServer(legacy_only=True) as server:
        events: list[Any] = []
        with client_for(server, on_transport_event=events.append) as client:
            configs = client.list_model_configs(server.organization_id)
            assert [c.model for c in configs] == [
                "claude-sonnet-4-6",
                "gpt-5",
                "claude-opus-legacy",
            ]
            assert client.prefix is None
            assert client.resolve_model_config_id("gpt-5", server.organization_id) == next(
                c.id for c in configs if c.model == "gpt-5"
            )
        paths = [(e.op, e.path) for e in events if e.type == "http:request"]
        org = f"/api/v2/organizations/{server.organization_id}/chats/models"
        legacy = "/api/experimental/chats/model-configs"
        assert paths == [
            ("list_model_configs", org),
            ("list_model_configs", legacy),
            ("resolve_model_config_id", org),
            ("resolve_model_config_id", legacy),
        ]


def test_model_listing_and_hints_on_a_current_server_wire_8(server: FakeCoderServer) -> None:
    events: list[Any] = []
    with client_for(server, on_transport_event=events.append) as client:
        configs = client.list_model_configs(server.organization_id)
        by_model = {c.model: c for c in configs}
        assert by_model["claude-sonnet-4-6"].provider == "anthropic"
        org = server.organization_id
        assert client.resolve_model_config_id("anthropic:claude-sonnet-4-6", org) == (
            by_model["claude-sonnet-4-6"].id
        )
        assert client.resolve_model_config_id("GPT-5", org) == by_model["gpt-5"].id
        assert client.resolve_model_config_id("Sonnet 4.6", org) == (
            by_model["claude-sonnet-4-6"].id
        )
        assert client.resolve_model_config_id("no-such-model", org) is None
        uuid = "7b9c0d1e-2f3a-4b5c-8d6e-7f8091a2b3c4"
        assert client.resolve_model_config_id(uuid, org) == uuid  # no request
    ops = [e.op for e in events if e.type == "http:request"]
    assert ops == ["list_model_configs"] + ["resolve_model_config_id"] * 4


# -- uploads (wire 7, D20) ---------------------------------------------------------------------------


def test_upload_round_trip_with_a_non_ascii_name(server: FakeCoderServer) -> None:
    seen: list[httpx.Request] = []

    def hook(request: httpx.Request) -> None:
        seen.append(request)

    supplied = httpx.Client(event_hooks={"request": [hook]})
    with client_for(server, http_client=supplied) as client:
        file_id = client.upload_chat_file(
            server.organization_id, b"# Notes\n", filename="ünïcødé notes.md"
        )
        downloaded = client.get_chat_file(file_id)
        chat = client.create_chat(
            organization_id=server.organization_id, content=["see file", FileInput(file_id)]
        )
    supplied.close()
    assert downloaded.data == b"# Notes\n" and downloaded.media_type.startswith("text/markdown")
    upload = seen[0]
    assert upload.url.path == f"{V2}/files" and upload.url.params["organization"] == (
        server.organization_id
    )
    assert upload.headers["Content-Type"] == "text/markdown"
    assert upload.headers["Content-Disposition"] == (
        'attachment; filename="_n_c_d_ notes.md"; '
        "filename*=UTF-8''%C3%BCn%C3%AFc%C3%B8d%C3%A9%20notes.md"
    )
    assert chat.id


def test_uploads_from_a_path_and_a_file_object(server: FakeCoderServer, tmp_path: Path) -> None:
    path = tmp_path / "data.json"
    path.write_bytes(b'{"a": 1}')
    with client_for(server) as client:
        from_path = client.upload_chat_file(server.organization_id, path)
        from_object = client.upload_chat_file(
            server.organization_id, io.BytesIO(b"a,b\n"), filename="t.csv"
        )
        assert (client.get_chat_file(from_path)).data == b'{"a": 1}'
        csv = client.get_chat_file(from_object)
    assert csv.data == b"a,b\n" and csv.media_type.startswith("text/csv")


def test_refused_uploads_never_reach_the_server_wire_7(
    server: FakeCoderServer, tmp_path: Path
) -> None:
    big = tmp_path / "big.txt"
    big.write_bytes(b"x" * (10 * 1024 * 1024 + 1))
    with client_for(server) as client:
        with pytest.raises(CoderAgentError, match='"application/zip" is not allowed'):
            client.upload_chat_file(server.organization_id, b"PK", filename="a.zip",
                                          media_type="application/zip")  # fmt: skip
        with pytest.raises(CoderAgentError, match="over the 10485760-byte"):
            client.upload_chat_file(server.organization_id, big)
        with pytest.raises(CoderAgentError, match="over the 10485760-byte"):
            client.upload_chat_file(
                server.organization_id, b"x" * (10 * 1024 * 1024 + 1), media_type="text/plain"
            )
        with pytest.raises(CoderAgentError, match="Could not determine"):
            client.upload_chat_file(server.organization_id, b"x")
        with pytest.raises(CoderAgentError, match="cannot read"):
            client.upload_chat_file(server.organization_id, tmp_path / "missing.txt")
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


def test_preview_and_share_use_v2_workspace_apis_without_events_wire_9() -> None:
    calls: list[str] = []
    events: list[Any] = []
    supplied = httpx.Client(transport=workspace_transport(calls))
    with CoderChatClient(
        "https://coder.example", "ws-token", http_client=supplied, on_transport_event=events.append
    ) as client:
        preview = client.preview_url("ws-1", 3000)
        shared = client.share_port("ws-1", 3000)
    supplied.close()
    assert preview.url == "https://3000--main--dev--alice.apps.example.com"
    assert preview.share_level is None and shared.share_level == "authenticated"
    assert sorted(calls[:2]) == ["GET /api/v2/applications/host", "GET /api/v2/workspaces/ws-1"]
    assert calls[-1] == "POST /api/v2/workspaces/ws-1/port-share"
    assert events == [] and client.prefix is None


# -- secrets (DESIGN rule 6) ------------------------------------------------------------------------


def test_the_token_never_appears_in_reprs_errors_logs_or_events(
    server: FakeCoderServer, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    events: list[Any] = []
    seen: list[str] = []
    token = server.token
    with client_for(server, on_transport_event=events.append) as client:
        seen.append(repr(client))
        seen.append(repr(client.settings))
        seen.append(repr(client.driver))
        chat = client.create_chat(organization_id=server.organization_id, content="weather")
        wait_status(client, chat.id, {"requires_action"})
        attempts: list[Callable[[], object]] = [
            lambda: client.get_chat("00000000-0000-4000-8000-000000000000"),
            lambda: client.interrupt_chat("00000000-0000-4000-8000-000000000000"),
            lambda: client.upload_chat_file(server.organization_id, b"x", media_type="image/tiff"),
        ]
        for attempt in attempts:
            with pytest.raises(CoderAgentError) as info:
                attempt()
            seen.append(str(info.value))
            seen.append(repr(info.value))
        with client.watch_chats() as watch:
            seen.append(repr(watch))
        client.interrupt_chat(chat.id, wait=True, last_status="requires_action")
    seen.extend(repr(e) for e in events)
    seen.extend(record.getMessage() for record in caplog.records)
    assert events and caplog.records
    assert not [text for text in seen if token in text]
    with pytest.raises(CoderAgentError) as refused:
        CoderChatClient(server.url, token + "\n")
    assert token not in str(refused.value)
