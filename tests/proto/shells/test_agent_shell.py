"""The runtime-independent half of every adapter's ``CoderAgent`` (``coder_proto.agent``:
``AgentShell``, ``AgentOperations``, ``segment_sink``, ``WorkspaceWrite``; H.1-H.3, wire 2, 7, 8,
11; D11, D17, D24; docs/architecture.md "Public API" and rule 6).

The shell is exercised with a stand-in client class (what an adapter's ``CoderChatClient``
offers the agent), the plain operations on the reference driver with scripted answers.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from typing import Any

import pytest

from coder_proto._agent.agent_core import AgentCore
from coder_proto._agent.options import AgentOptions
from coder_proto._agent.prompt_plan import AttachedFile
from coder_proto._agent.session import Session
from coder_proto._agent.session_calls import SessionInterrupt
from coder_proto._agent.session_state import SessionConfig
from coder_proto._agent.workspace_files import WorkspaceWrite
from coder_proto._errors import CoderAgentError
from coder_proto._rest.http import HttpRequest
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._rest.settings import ClientSettings
from coder_proto._shells.agent_calls import AgentOperations
from coder_proto._shells.agent_shell import AgentShell, check_connection, segment_sink
from coder_proto._transport_events import HttpRequestEvent, SegmentStartEvent, TransportEventSink
from coder_proto.transcript._recorder import Recorder, TranscriptRecorder
from tests.core_driver import Driver, Respond, chat_stub, empty_page

BASE = "https://coder.test"
ORG = "0f0e0d0c-0000-4000-8000-000000000001"
TOKEN = "tok-agent-shell-secret"


class FakeDriver:
    def __init__(self) -> None:
        self.recorder: Recorder | None = None


class Client:
    """What an adapter's client offers the agent shell."""

    def __init__(
        self,
        base_url: str | None = None,
        token: str | None = None,
        *,
        http_client: Any = None,
        verify: Any = True,
        on_transport_event: Callable[[Any], object] | None = None,
        recorder: Recorder | None = None,
    ) -> None:
        self.settings = ClientSettings.resolve(base_url, token)
        self.selector = PrefixSelector()
        self.sink = self._make_sink(on_transport_event)
        self.driver = FakeDriver()
        self.driver.recorder = recorder
        self.made = {"http_client": http_client, "verify": verify}

    @staticmethod
    def _make_sink(callback: Callable[[Any], object] | None) -> TransportEventSink:
        return TransportEventSink(callback, wall_clock=lambda: 1234.5)


class OtherClient(Client):
    """A client of another runtime."""


class Agent(AgentShell[Client, object]):
    _client_class = Client

    def _setup(self) -> None:
        self.set_up = True


def test_without_a_client_the_agent_builds_one_with_the_connection_settings_h1() -> None:
    events: list[Any] = []
    http = object()
    agent = Agent(
        base_url=BASE,
        token=TOKEN,
        organization_id=ORG,
        http_client=http,
        verify=False,
        on_transport_event=events.append,
    )
    client = agent.client
    assert isinstance(client, Client) and agent._owns_client
    assert client.made == {"http_client": http, "verify": False}
    assert client.settings.token == TOKEN
    assert agent._core.session.sink is client.sink  # every event to the one hook
    assert agent.set_up and not agent._closed
    assert isinstance(agent._calls, AgentOperations)


def test_the_session_state_is_the_cores_h1() -> None:
    agent = Agent(base_url=BASE, token=TOKEN, organization_id=ORG, chat_id="c1")
    assert agent.chat_id == "c1" and agent.last_seen_message_id is None
    assert agent.last_known_chat_id == "c1" and agent.stranded_chat_ids == ()
    agent._core.session.add_stranded("s1")
    assert agent.stranded_chat_ids == ("s1",)
    assert repr(agent) == "<CoderAgent chat_id='c1' last_seen_message_id=None>"
    assert TOKEN not in repr(agent)


def test_a_recorder_is_handed_to_the_clients_driver() -> None:
    recorder = TranscriptRecorder([].append)
    agent = Agent(base_url=BASE, token=TOKEN, organization_id=ORG, recorder=recorder)
    assert agent.client.driver.recorder is recorder
    shared = Client(BASE, TOKEN)
    Agent(client=shared, organization_id=ORG, recorder=recorder)
    assert shared.driver.recorder is recorder


def test_a_supplied_client_is_used_and_never_owned() -> None:
    client = Client(BASE, TOKEN)
    agent = Agent(client=client, organization_id=ORG)
    assert agent.client is client and not agent._owns_client
    assert agent._core.session.sink is client.sink


@pytest.mark.parametrize("extra", [{"base_url": BASE}, {"token": TOKEN}, {"http_client": object()}])
def test_a_supplied_client_excludes_the_connection_settings(extra: dict[str, Any]) -> None:
    with pytest.raises(CoderAgentError, match="either client or base_url/token/http_client"):
        Agent(client=Client(BASE, TOKEN), organization_id=ORG, **extra)


def test_a_client_of_another_runtime_is_refused() -> None:
    with pytest.raises(CoderAgentError, match="client must be a tests CoderChatClient"):
        Agent(client=object(), organization_id=ORG)  # type: ignore[arg-type]


def test_check_connection_without_a_client_accepts_anything() -> None:
    check_connection(None, base_url=BASE, token=TOKEN, http_client=object())


def test_bad_agent_settings_fail_at_construction_h2() -> None:
    with pytest.raises(CoderAgentError, match="max_steps"):
        Agent(base_url=BASE, token=TOKEN, organization_id=ORG, max_steps=0)


# -- event routing with a supplied client (wire 11, D24) --------------------------------------------


def test_segment_events_go_to_the_agents_hook_and_the_rest_to_the_clients_d24() -> None:
    theirs: list[Any] = []
    ours: list[Any] = []
    client = Client(BASE, TOKEN, on_transport_event=theirs.append)
    agent = Agent(client=client, organization_id=ORG, on_transport_event=ours.append)
    sink = agent._core.session.sink
    assert sink is not client.sink and sink.now() == 1234.5
    start = SegmentStartEvent(segment=1, chat_id=None, timestamp=1.0)
    sink.emit(start)
    other = HttpRequestEvent(id=1, op="get_chat", method="GET", path="/x", timestamp=1.0)
    sink.emit(other)
    assert ours == [start] and theirs == [other]


def test_without_an_agent_hook_every_event_goes_to_the_clients_sink() -> None:
    client_sink = TransportEventSink(lambda e: None)
    assert segment_sink(client_sink, None) is client_sink


# -- the plain operations (H.3, wire 2, 7, 8; D11, D17) --------------------------------------------


class World:
    def __init__(self, rest: dict[str, Any] | None = None, *, chat_id: str | None = None) -> None:
        self.rest = rest or {}
        options = AgentOptions(organization_id=ORG)
        self.core = AgentCore(options, base_url=BASE, token=TOKEN, chat_id=chat_id)
        self.calls = AgentOperations(self.core)
        self.driver = Driver(Session(SessionConfig(base_url=BASE)), http=self.http)

    def http(self, request: HttpRequest) -> Any:
        return self.rest.get(f"{request.method} {request.path}", Respond(200, chat_stub()))

    def perform(self, call: Any, data: Any = None) -> Any:
        return call.finish(self.driver.run(call.machine(self.driver.now, data)))


def test_interrupt_runs_the_sessions_interrupt_in_its_scope_h3() -> None:
    world = World(chat_id="c1")
    call = world.calls.interrupt(wait=True, timeout=3.0)
    assert call.session is world.core.session
    machine = call.machine(1.0, None)
    assert isinstance(machine, SessionInterrupt)
    assert "AgentOperations" in repr(world.calls)


def test_models_and_cost_use_the_agents_organization_and_chat_d17() -> None:
    world = World(
        {
            f"GET /api/v2/organizations/{ORG}/chats/models": Respond(200, []),
            "GET /api/v2/chats/c1/cost": Respond(200, {"chat_id": "c1", "request_count": 2}),
            "GET /api/v2/chats/c9/cost": Respond(200, {"chat_id": "c9"}),
        },
        chat_id="c1",
    )
    assert world.perform(world.calls.list_models()) == ()
    assert world.perform(world.calls.get_chat_cost()).chat_id == "c1"
    assert world.perform(world.calls.get_chat_cost("c9")).chat_id == "c9"
    with pytest.raises(CoderAgentError, match="no chat yet"):
        World().calls.get_chat_cost()


def test_the_conversation_operations_act_on_the_agents_chat_wire_2_4() -> None:
    message = {"id": 9, "chat_id": "c1", "role": "user", "created_at": "", "content": []}
    world = World(
        {
            "POST /api/v2/chats/c1/compact": Respond(200, {"id": "c1", "status": "running"}),
            "POST /api/v2/chats/c1/clear": Respond(200, {"id": "c1", "status": "waiting"}),
            "PATCH /api/v2/chats/c1/messages/4": Respond(200, {"message": message}),
            "GET /api/v2/chats/c1/prompts?limit=2": Respond(
                200, {"prompts": [{"id": 4, "text": "hi"}]}
            ),
            "POST /api/v2/chats/c1/title/propose": Respond(200, {"title": "T"}),
            "GET /api/v2/chats/c1/diff": Respond(200, {"chat_id": "c1", "diff": "+a"}),
        },
        chat_id="c1",
    )
    assert world.perform(world.calls.compact()).status == "running"
    assert world.perform(world.calls.clear()).status == "waiting"
    edited = world.perform(world.calls.edit_message(4, "new", reasoning_effort="low"))
    assert edited.message.id == 9
    assert world.driver.requests()[-1].json == {
        "content": [{"type": "text", "text": "new"}],
        "reasoning_effort": "low",
    }
    assert [p.text for p in world.perform(world.calls.prompts(limit=2))] == ["hi"]
    assert world.perform(world.calls.propose_title()) == "T"
    assert world.perform(world.calls.diff()).diff == "+a"
    with pytest.raises(CoderAgentError, match="no chat yet"):
        World().calls.compact()


def test_attach_uploads_once_and_returns_a_reference_wire_7() -> None:
    world = World({f"POST /api/v2/chats/files?organization={ORG}": Respond(201, {"id": "f1"})})
    attached = world.perform(world.calls.attach(b"{}", filename="a.json"))
    assert attached == AttachedFile(file_id="f1", media_type="application/json", filename="a.json")
    from_object = world.calls.attach(io.BytesIO(b"a,b"), filename="t.csv")
    assert from_object.read is not None  # the adapter reads the file object first
    assert world.perform(from_object, b"a,b").media_type == "text/csv"
    with pytest.raises(CoderAgentError, match="is not allowed"):
        world.calls.attach(b"PK", filename="a.zip", media_type="application/zip")


def test_history_walks_the_pages_and_converts_to_ui_messages_i() -> None:
    world = World(
        {"GET /api/v2/chats/c1/messages?limit=200": Respond(200, empty_page())}, chat_id="c1"
    )
    assert world.perform(world.calls.history()) == []
    with pytest.raises(CoderAgentError, match="no chat yet"):
        World().calls.history()


# -- workspace files (docs/agents.md "Workspace files") ------------------------------------------------


class Files:
    workspace_id = "ws-1"

    def write_file(self, path: str, data: bytes) -> Any:
        return None


def test_a_workspace_write_is_planned_before_any_io() -> None:
    core = AgentCore(
        AgentOptions(organization_id=ORG, workspace_id="ws-1"),
        base_url=BASE,
        token=TOKEN,
        workspace_files=Files(),
    )
    write = core.workspace_write(b"data", "/tmp/a.bin")
    assert isinstance(write, WorkspaceWrite) and write.target == "/tmp/a.bin"
    assert write.plan.data == b"data"
    assert write.result(None, b"data").path == "/tmp/a.bin"
    assert write.result("/home/coder/a.bin", b"data").path == "/home/coder/a.bin"
    assert write.result("", b"xyz").size == 3
    assert WorkspaceWrite.data(bytearray(b"ab")) == b"ab"
    with pytest.raises(CoderAgentError, match="binary mode"):
        WorkspaceWrite.data("text")
    with pytest.raises(CoderAgentError, match="workspace path"):
        core.workspace_write(b"x", "")
