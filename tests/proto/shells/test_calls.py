"""The raw client's operations, defined once for every adapter (``coder_proto._shells.client_calls``; wire
2, 7, 8, 9; D4, D10, D11, D16, D17, D20; docs/architecture.md "Public API": the same methods with the same
parameters on every runtime).

Each operation validates its arguments when called (before any request), names the file an
upload must read first, and builds the machine that performs it; the machines run here on the
reference driver (``tests.core_driver``) with scripted REST answers.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import pytest

from coder_proto import CoderAgentError, CoderApiError, CreateChatRequest, TextInput
from coder_proto._actions import ToolOutcome
from coder_proto._agent.session import Session
from coder_proto._agent.session_state import SessionConfig
from coder_proto._rest.http import HttpRequest
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._rest.settings import ClientSettings
from coder_proto._shells.client_calls import ChatOperations, Operation, public_method
from coder_proto._shells.client_shell import ClientShell
from coder_proto._transport_events import TransportEventSink
from tests.core_driver import Driver, Respond, chat_stub

V2 = "/api/v2/chats"
ORG = "0f0e0d0c-0000-4000-8000-000000000001"
CHAT = "c0ffee00-0000-4000-8000-000000000001"


class World:
    """One client's ``ChatOperations`` on the reference driver, with a REST answer table
    (``METHOD path`` -> reply; anything else gets 200 with a chat stub)."""

    def __init__(self, rest: dict[str, Any] | None = None) -> None:
        self.rest = rest or {}
        self.selector = PrefixSelector()
        self.calls = ChatOperations(self.selector, "https://coder.test")
        self.driver = Driver(Session(SessionConfig(base_url="https://coder.test")), http=self.http)

    def http(self, request: HttpRequest) -> Any:
        return self.rest.get(f"{request.method} {request.path}", Respond(200, chat_stub()))

    def perform(self, call: Operation[Any], data: Any = None) -> Any:
        """What an adapter does: read (the test hands the bytes), build, run, finish."""
        return call.finish(self.driver.run(call.machine(self.driver.now, data)))

    def requests(self) -> list[HttpRequest]:
        return self.driver.requests()


# -- every operation builds its request (wire 2) ---------------------------------------------------


@pytest.mark.parametrize(
    ("invoke", "method", "path"),
    [
        (lambda c: c.create_chat(organization_id=ORG, content="hi"), "POST", V2),
        (lambda c: c.get_chat(CHAT), "GET", f"{V2}/{CHAT}"),
        (lambda c: c.list_chats(limit=2), "GET", f"{V2}?limit=2"),
        (lambda c: c.update_chat(CHAT, title="T"), "PATCH", f"{V2}/{CHAT}"),
        (lambda c: c.archive_chat(CHAT), "PATCH", f"{V2}/{CHAT}"),
        (lambda c: c.interrupt_chat(CHAT), "POST", f"{V2}/{CHAT}/interrupt"),
        (lambda c: c.get_chat_cost(CHAT), "GET", f"{V2}/{CHAT}/cost"),
        (lambda c: c.create_chat_message(CHAT, content="x"), "POST", f"{V2}/{CHAT}/messages"),
        (lambda c: c.get_messages(CHAT, after_id=3), "GET", f"{V2}/{CHAT}/messages?after_id=3"),
        (
            lambda c: c.submit_tool_results(CHAT, [ToolOutcome(tool_call_id="t1", output=1)]),
            "POST",
            f"{V2}/{CHAT}/tool-results",
        ),
        (lambda c: c.delete_queued_message(CHAT, 4), "DELETE", f"{V2}/{CHAT}/queue/4"),
        (lambda c: c.get_chat_file(CHAT), "GET", f"{V2}/files/{CHAT}"),
        (lambda c: c.edit_chat_message(CHAT, 5, "y"), "PATCH", f"{V2}/{CHAT}/messages/5"),
        (lambda c: c.get_chat_prompts(CHAT, limit=3), "GET", f"{V2}/{CHAT}/prompts?limit=3"),
        (lambda c: c.compact_chat(CHAT), "POST", f"{V2}/{CHAT}/compact"),
        (lambda c: c.clear_chat(CHAT), "POST", f"{V2}/{CHAT}/clear"),
        (lambda c: c.reconcile_chat(CHAT), "POST", f"{V2}/{CHAT}/reconcile-invalid"),
        (lambda c: c.refresh_chat_context(CHAT), "PUT", f"{V2}/{CHAT}/context"),
        (lambda c: c.propose_chat_title(CHAT), "POST", f"{V2}/{CHAT}/title/propose"),
        (lambda c: c.get_chat_diff(CHAT), "GET", f"{V2}/{CHAT}/diff"),
        (
            lambda c: c.get_chats_by_workspace([CHAT]),
            "GET",
            f"{V2}/by-workspace?workspace_ids={CHAT}",
        ),
        (
            lambda c: c.get_chat_file_download_url(CHAT),
            "POST",
            f"{V2}/files/{CHAT}/download-url",
        ),
        (lambda c: c.update_chat(CHAT, pin_order=1), "PATCH", f"{V2}/{CHAT}"),
    ],
)
def test_each_operation_sends_its_request_wire_2(
    invoke: Callable[[ChatOperations], Operation[Any]], method: str, path: str
) -> None:
    world = World()
    call = invoke(world.calls)
    assert call.read is None and call.session is None
    try:
        world.perform(call)
    except CoderAgentError:
        pass  # the chat stub is not every operation's answer; the request is what counts
    request = world.requests()[0]
    assert (request.method, request.path) == (method, path)


def test_create_chat_takes_a_request_or_keywords_and_returns_the_chat_wire_2_1() -> None:
    world = World({f"POST {V2}": Respond(201, chat_stub(CHAT))})
    chat = world.perform(world.calls.create_chat(organization_id=ORG, content="hello"))
    assert chat.id == CHAT
    request = CreateChatRequest(organization_id=ORG, content=(TextInput("x"),))
    world.perform(world.calls.create_chat(request))
    bodies = [r.json for r in world.requests()]
    assert bodies[0]["content"] == [{"type": "text", "text": "hello"}]
    assert bodies[1]["content"] == [{"type": "text", "text": "x"}]


def test_arguments_are_checked_when_the_operation_is_called_before_any_request() -> None:
    world = World()
    with pytest.raises(CoderAgentError, match="not both"):
        world.calls.create_chat(CreateChatRequest(organization_id=ORG, content=()), content="x")
    with pytest.raises(CoderAgentError):
        world.calls.submit_tool_results(CHAT, "not results")
    with pytest.raises(CoderAgentError, match="is not allowed"):
        world.calls.upload_chat_file(ORG, b"PK", filename="a.zip", media_type="application/zip")
    assert world.requests() == []


def test_an_error_status_is_raised_by_the_machine_d10() -> None:
    world = World({f"PATCH {V2}/{CHAT}": Respond(409, {"message": "active"})})
    with pytest.raises(CoderApiError) as info:
        world.perform(world.calls.archive_chat(CHAT))
    assert info.value.status == 409


def test_interrupt_with_wait_sends_the_wait_query_d11() -> None:
    settled = Respond(200, chat_stub(CHAT, status="waiting"))
    world = World({f"POST {V2}/{CHAT}/interrupt?wait=true": settled, f"GET {V2}/{CHAT}": settled})
    world.perform(world.calls.interrupt_chat(CHAT, wait=True, timeout=5.0))
    assert world.requests()[0].path == f"{V2}/{CHAT}/interrupt?wait=true"


# -- uploads (wire 7, D20) -------------------------------------------------------------------------


def test_bytes_upload_needs_no_read_and_sends_the_bytes() -> None:
    world = World({f"POST {V2}/files?organization={ORG}": Respond(201, {"id": "file-1"})})
    call = world.calls.upload_chat_file(ORG, b"# notes\n", filename="n.md")
    assert call.read is None
    assert world.perform(call) == "file-1"
    request = world.requests()[0]
    assert request.body == b"# notes\n"
    assert ("Content-Type", "text/markdown") in request.headers


def test_a_path_upload_names_the_file_to_read_then_sends_what_was_read(tmp_path: Any) -> None:
    path = tmp_path / "data.json"
    world = World({f"POST {V2}/files?organization={ORG}": Respond(201, {"id": "file-2"})})
    call = world.calls.upload_chat_file(ORG, path)
    assert call.read is not None and call.read.path == str(path)
    assert world.perform(call, b'{"a": 1}') == "file-2"
    assert world.requests()[0].body == b'{"a": 1}'


def test_what_a_file_object_returned_is_checked_before_the_request_wire_7() -> None:
    class Text:
        name = "t.csv"

        def read(self) -> str:
            return "a,b"

    world = World()
    call = world.calls.upload_chat_file(ORG, Text())
    with pytest.raises(CoderAgentError, match="binary mode"):
        world.perform(call, "a,b")
    assert world.requests() == []


# -- models and workspaces (wire 8, 9; D16) -------------------------------------------------------


def test_model_configs_use_the_org_route_and_a_uuid_hint_needs_no_request_d16() -> None:
    world = World({f"GET /api/v2/organizations/{ORG}/chats/models": Respond(200, [])})
    assert world.perform(world.calls.list_model_configs(ORG)) == ()
    uuid = "7b9c0d1e-2f3a-4b5c-8d6e-7f8091a2b3c4"
    assert world.perform(world.calls.resolve_model_config_id(uuid, ORG)) == uuid
    assert [r.op for r in world.requests()] == ["list_model_configs"]


def test_preview_and_share_build_workspace_machines_wire_9() -> None:
    world = World()
    preview = world.calls.preview_url("ws-1", 3000, agent_name="main").machine(0.0, None)
    shared = world.calls.share_port("ws-1", 3000, share_level="public").machine(0.0, None)
    assert (preview.share_level, shared.share_level) == (None, "public")
    assert preview.base_url == shared.base_url == "https://coder.test"
    assert "coder.test" in repr(world.calls)


# -- presenting an operation as an adapter's method (docs/architecture.md "Public API") -------------


def test_a_public_method_has_the_operations_name_docstring_and_signature() -> None:
    def wrapper(self: Any, *args: Any, **kwargs: Any) -> Any:
        return None

    method = public_method(wrapper, ChatOperations.create_chat, owner="CoderChatClient")
    assert method.__name__ == "create_chat"
    assert method.__qualname__ == "CoderChatClient.create_chat"
    assert method.__doc__ == ChatOperations.create_chat.__doc__
    signature = inspect.signature(method)
    assert list(signature.parameters) == list(
        inspect.signature(ChatOperations.create_chat).parameters
    )
    assert signature.return_annotation == "Chat"  # Operation[Chat] as the adapter returns it


def test_a_return_annotation_that_is_not_a_call_is_kept() -> None:
    def spec(self: Any) -> int:
        """Spec."""
        return 1

    method = public_method(lambda self: 1, spec, owner="X")
    assert inspect.signature(method).return_annotation == "int"


# -- the client shell (wire 1.1, 1.4, 11) -----------------------------------------------------------


class _FakeDriver:
    def __init__(self, **kwargs: Any) -> None:
        self.kwargs = kwargs


class _Client(ClientShell[object]):
    _driver_class = _FakeDriver

    @staticmethod
    def _make_sink(callback: Callable[[Any], object] | None) -> TransportEventSink:
        return TransportEventSink(callback)


def test_the_client_shell_resolves_settings_and_builds_its_driver_wire_1() -> None:
    events: list[Any] = []
    client = _Client("https://coder.test/", "tok-shell-secret", on_transport_event=events.append)
    assert client.settings == ClientSettings(
        base_url="https://coder.test", token="tok-shell-secret"
    )
    assert client.base_url == "https://coder.test" and client.prefix is None
    assert client.sink.enabled
    assert client.driver.kwargs["token"] == "tok-shell-secret"
    assert client.driver.kwargs["sink"] is client.sink
    assert "tok-shell-secret" not in repr(client) and "coder.test" in repr(client)
    pinned = _Client("https://coder.test", "t", prefix=V2)
    assert pinned.prefix == V2
    assert isinstance(pinned._calls, ChatOperations)


def test_the_client_shell_refuses_missing_settings() -> None:
    with pytest.raises(CoderAgentError, match="CODER_SESSION_TOKEN"):
        _Client("https://coder.test", None)
