"""The pure side of the raw chat client (wire 1.1, 2, 7, 8, 9; D4, D10, D11, D16, D20, D23,
D24): settings, one machine per REST operation, request bodies from Python arguments, model
listing and hint resolution, workspace previews and upload planning.

Machines run on the reference driver (``tests.core_driver``) with scripted REST answers.
"""

from __future__ import annotations

import io
import pathlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import (
    CoderAgentError,
    CoderApiError,
    CoderNetworkError,
    CreateChatMessageRequest,
    CreateChatRequest,
    DynamicTool,
    FileInput,
    FileReferenceInput,
    TextInput,
    ToolResultInput,
)
from coder_proto._actions import ToolOutcome
from coder_proto._agent.session import Session
from coder_proto._agent.session_state import SessionConfig
from coder_proto._jobs.operations import (
    ModelConfigsJob,
    PreviewJob,
    ResolveModelJob,
    RestJob,
    interrupt_job,
    rest_job,
)
from coder_proto._jobs.organization import UNKNOWN_ORGANIZATION
from coder_proto._rest.http import HttpRequest, HttpResponse
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._rest.routes import build_get_chat, parse_get_chat
from coder_proto._rest.settings import CONNECT_TIMEOUT, ClientSettings, emits_transport_events
from coder_proto._rest.uploads import UploadPlan, guess_media_type, plan_upload, upload_result
from coder_proto._shells.client_arguments import (
    chat_input_parts,
    create_chat_message_request,
    create_chat_request,
    tool_result_inputs,
)
from tests.core_driver import Driver, Hang, NetworkError, Respond, chat_stub

V2 = "/api/v2/chats"
LEGACY = "/api/experimental/chats"
ORG = "0f0e0d0c-0000-4000-8000-000000000001"
UUID = "7b9c0d1e-2f3a-4b5c-8d6e-7f8091a2b3c4"
TOKEN = "tok-client-core-secret"


class World:
    """A selector, the reference driver and a REST answer table (``METHOD path`` -> reply or
    list of replies; unmatched requests get 200 with a chat stub)."""

    def __init__(self, rest: dict[str, Any] | None = None, *, prefix: str | None = None) -> None:
        self.rest = rest or {}
        self.selector = PrefixSelector(prefix)
        self.driver = Driver(Session(SessionConfig(base_url="https://coder.test")), http=self.http)

    def http(self, request: HttpRequest) -> Any:
        reply = self.rest.get(f"{request.method} {request.path}", Respond(200, chat_stub()))
        if isinstance(reply, list):
            reply = reply.pop(0) if len(reply) > 1 else reply[0]
        return reply

    @property
    def now(self) -> float:
        return self.driver.now

    def run(self, machine: Any) -> Any:
        return self.driver.run(machine)

    def routes(self) -> list[str]:
        return self.driver.routes()

    def ops(self) -> list[str]:
        return [r.op for r in self.driver.requests()]


# -- facts for every driver (D23, wire 9, 11) ------------------------------------------------


def test_connect_timeout_is_30_seconds_d23() -> None:
    assert CONNECT_TIMEOUT == 30.0


@pytest.mark.parametrize(
    ("op", "observed"),
    [
        ("create_chat", True),
        ("list_model_configs", True),
        ("watch_chats", True),
        ("get_workspace", False),
        ("get_app_host", False),
        ("share_port", False),
    ],
)
def test_workspace_helpers_emit_no_transport_events_wire_9(op: str, observed: bool) -> None:
    assert emits_transport_events(HttpRequest(op=op, method="GET", path="/x")) is observed


# -- settings (wire 1.1) ----------------------------------------------------------------------


def test_explicit_settings_win_over_the_environment() -> None:
    env = {"CODER_URL": "https://env.example", "CODER_SESSION_TOKEN": "env-token"}
    s = ClientSettings.resolve("https://explicit.example/", "explicit-token", environ=env)
    assert (s.base_url, s.token) == ("https://explicit.example", "explicit-token")


def test_the_environment_supplies_missing_settings() -> None:
    env = {"CODER_URL": "http://127.0.0.1:3000/", "CODER_SESSION_TOKEN": "env-token"}
    s = ClientSettings.resolve(environ=env)
    assert (s.base_url, s.token) == ("http://127.0.0.1:3000", "env-token")


def test_only_one_trailing_slash_is_removed_wire_1_1() -> None:
    s = ClientSettings.resolve("https://coder.example/base//", "t")
    assert s.base_url == "https://coder.example/base/"


def test_a_missing_url_names_coder_url() -> None:
    with pytest.raises(CoderAgentError, match="CODER_URL"):
        ClientSettings.resolve(None, "t", environ={"CODER_URL": ""})


def test_a_missing_token_names_coder_session_token() -> None:
    with pytest.raises(CoderAgentError, match="CODER_SESSION_TOKEN"):
        ClientSettings.resolve("https://coder.example", None, environ={})
    with pytest.raises(CoderAgentError, match="CODER_SESSION_TOKEN"):
        ClientSettings.resolve("https://coder.example", "")


@pytest.mark.parametrize(
    "url",
    ["coder.example", "ftp://coder.example", "https://", "https://coder.example?x=1", "http://[::"],
)
def test_a_url_that_is_not_http_with_a_host_is_refused(url: str) -> None:
    with pytest.raises(CoderAgentError, match="base_url"):
        ClientSettings.resolve(url, "t")


def test_wrong_types_are_refused_without_echoing_the_token() -> None:
    with pytest.raises(CoderAgentError, match="base_url must be a string"):
        ClientSettings.resolve(42, "t")  # type: ignore[arg-type]
    with pytest.raises(CoderAgentError, match="token must be a string"):
        ClientSettings.resolve("https://c.example", b"tok")  # type: ignore[arg-type]
    with pytest.raises(CoderAgentError) as info:
        ClientSettings.resolve("https://c.example", TOKEN + "\n")
    assert TOKEN not in str(info.value)


def test_the_token_is_not_in_the_repr() -> None:
    s = ClientSettings.resolve("https://c.example", TOKEN)
    assert TOKEN not in repr(s) and "c.example" in repr(s)


# -- REST jobs (wire 1.4, 2, 10) ----------------------------------------------------------------


def test_rest_job_negotiates_the_prefix_and_parses_the_answer() -> None:
    w = World({f"GET {V2}/chat-1": Respond(404), f"GET {LEGACY}/chat-1": Respond(200, chat_stub())})
    chat = w.run(rest_job(w.selector, "get_chat", "chat-1", now=w.now))
    assert chat.id == "chat-1"
    assert w.routes() == [f"GET {V2}/chat-1", f"GET {LEGACY}/chat-1"]
    assert w.selector.prefix == LEGACY
    w.run(rest_job(w.selector, "get_chat", "chat-2", now=w.now))
    assert w.routes()[-1] == f"GET {LEGACY}/chat-2"


def test_rest_job_raises_the_api_error_of_a_non_2xx_wire_10() -> None:
    w = World({f"GET {V2}/chat-1": Respond(401, {"message": "Unauthorized"})})
    with pytest.raises(CoderApiError) as info:
        w.run(rest_job(w.selector, "get_chat", "chat-1", now=w.now))
    assert (info.value.status, info.value.path) == (401, f"{V2}/chat-1")
    assert w.selector.prefix == V2  # a non-404 error proves the v2 routes exist


def test_rest_job_network_failure_is_a_retryable_network_error_d21() -> None:
    w = World({f"GET {V2}/chat-1": NetworkError("connection refused")})
    with pytest.raises(CoderNetworkError) as info:
        w.run(rest_job(w.selector, "get_chat", "chat-1", now=w.now))
    assert info.value.retryable and "connection refused" in str(info.value)
    assert w.selector.prefix is None


def test_rest_job_validates_its_arguments_before_any_request() -> None:
    w = World()
    with pytest.raises(CoderAgentError, match="chat_id"):
        rest_job(w.selector, "get_chat", "", now=w.now)
    with pytest.raises(CoderAgentError, match="unknown client operation"):
        rest_job(w.selector, "delete_everything", now=w.now)
    with pytest.raises(CoderAgentError, match="HttpRequest"):
        RestJob(w.selector, "GET /", parse_get_chat, now=w.now)  # type: ignore[arg-type]
    assert w.routes() == []


def test_rest_job_repr_names_the_op() -> None:
    w = World()
    job = RestJob(w.selector, build_get_chat("c"), parse_get_chat, now=w.now)
    assert "get_chat" in repr(job)


@pytest.mark.parametrize(
    ("reply", "outcome"),
    [
        (Respond(204), "archived"),
        (Respond(400, {"message": "Chat is already archived."}), "already_archived"),
    ],
)
def test_archive_chat_counts_already_archived_as_success_d10(reply: Any, outcome: str) -> None:
    w = World({f"PATCH {V2}/chat-1": reply})
    assert w.run(rest_job(w.selector, "archive_chat", "chat-1", now=w.now)) == outcome
    assert w.driver.requests()[0].json == {"archived": True}
    assert w.ops() == ["archive_chat"]


def test_raw_archive_chat_raises_a_409_without_retrying() -> None:
    w = World({f"PATCH {V2}/chat-1": Respond(409, {"message": "Cannot archive an active chat."})})
    with pytest.raises(CoderApiError) as info:
        w.run(rest_job(w.selector, "archive_chat", "chat-1", now=w.now))
    assert info.value.status == 409 and len(w.routes()) == 1


# -- interrupt_chat (D4, D11) -------------------------------------------------------------------


def test_interrupt_without_wait_posts_once() -> None:
    w = World({f"POST {V2}/c/interrupt": Respond(200, chat_stub("c", status="interrupting"))})
    chat = w.run(interrupt_job(w.selector, "c", now=w.now))
    assert chat.status == "interrupting" and w.routes() == [f"POST {V2}/c/interrupt"]


def test_interrupt_with_wait_polls_every_second_until_settled_d11() -> None:
    w = World(
        {
            f"POST {V2}/c/interrupt?wait=true": Respond(200, chat_stub("c", status="interrupting")),
            f"GET {V2}/c": [
                Respond(200, chat_stub("c", status="interrupting")),
                Respond(200, chat_stub("c", status="waiting")),
            ],
        }
    )
    start = w.now
    chat = w.run(interrupt_job(w.selector, "c", now=w.now, wait=True))
    assert chat.status == "waiting"
    assert w.routes() == [f"POST {V2}/c/interrupt?wait=true", f"GET {V2}/c", f"GET {V2}/c"]
    assert [s.at - start for s in w.driver.sent] == [0.0, 1.0, 2.0]


def test_interrupt_wait_raises_builtin_timeout_error_after_the_timeout_d11() -> None:
    busy = Respond(200, chat_stub("c", status="running"))
    w = World({f"POST {V2}/c/interrupt?wait=true": busy, f"GET {V2}/c": busy})
    with pytest.raises(TimeoutError):
        w.run(interrupt_job(w.selector, "c", now=w.now, wait=True, timeout=3.0))
    assert w.routes().count(f"GET {V2}/c") <= 3


def test_interrupt_sends_the_d4_follow_up_for_a_paused_chat() -> None:
    w = World(
        {
            f"POST {V2}/c/interrupt": [
                Respond(200, chat_stub("c", status="running")),
                Respond(200, chat_stub("c", status="interrupting")),
            ]
        }
    )
    chat = w.run(interrupt_job(w.selector, "c", now=w.now, last_status="requires_action"))
    assert chat.status == "interrupting" and len(w.routes()) == 2


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"wait": "yes"}, "wait"),
        ({"timeout": 0}, "timeout"),
        ({"timeout": True}, "timeout"),
        ({"timeout": "5"}, "timeout"),
    ],
)
def test_interrupt_arguments_are_validated(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(CoderAgentError, match=match):
        interrupt_job(PrefixSelector(), "c", now=0.0, **kwargs)


# -- request bodies ----------------------------------------------------------------------------


def test_content_parts_from_strings_and_parts_wire_3_1() -> None:
    ref = FileReferenceInput(file_name="a.py", start_line=1, end_line=2, content="x")
    assert chat_input_parts("hi") == (TextInput("hi"),)
    assert chat_input_parts(FileInput("f1")) == (FileInput("f1"),)
    assert chat_input_parts(["a", FileInput("f"), ref]) == (TextInput("a"), FileInput("f"), ref)


@pytest.mark.parametrize("bad", [[], b"bytes", 3, [3], [{"type": "text"}]])
def test_bad_content_is_refused(bad: Any) -> None:
    with pytest.raises(CoderAgentError, match="content"):
        chat_input_parts(bad)


def test_create_chat_request_from_keywords_sends_only_set_fields_wire_2_1() -> None:
    tool = DynamicTool(name="t", input_schema={"type": "object"})
    body = create_chat_request(
        organization_id=ORG,
        content="hello",
        system_prompt="be brief",
        tools=[tool],
        workspace_id="ws",
        mcp_server_ids=["m1"],
        labels={"team": "a"},
    )
    assert body.to_json() == {
        "organization_id": ORG,
        "content": [{"type": "text", "text": "hello"}],
        "client_type": "api",
        "system_prompt": "be brief",
        "unsafe_dynamic_tools": [{"name": "t", "input_schema": {"type": "object"}}],
        "workspace_id": "ws",
        "mcp_server_ids": ["m1"],
        "labels": {"team": "a"},
    }


def test_create_chat_request_passes_a_request_through() -> None:
    given_body = CreateChatRequest(organization_id=ORG, content=(TextInput("x"),))
    assert create_chat_request(given_body) is given_body


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((CreateChatRequest(organization_id=ORG, content=()),), {"content": "x"}, "not both"),
        (("body",), {}, "CreateChatRequest"),
        ((), {"organization_id": ORG}, "content"),
        ((), {"organization_id": ORG, "content": "x", "tools": ["t"]}, "DynamicTool"),
        ((), {"organization_id": ORG, "content": "x", "labels": {"a": 1}}, "labels"),
        ((), {"organization_id": ORG, "content": "x", "mcp_server_ids": "m1"}, "mcp_server_ids"),
        ((), {"organization_id": ORG, "content": "x", "mcp_server_ids": [""]}, "mcp_server_ids"),
        ((), {"organization_id": ORG, "content": "x", "system_prompt": 3}, "system_prompt"),
        ((), {"organization_id": "", "content": "x"}, "organization_id"),
    ],
)
def test_create_chat_request_refuses_bad_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(CoderAgentError, match=match):
        create_chat_request(*args, **kwargs)


def test_create_chat_message_request_from_keywords_wire_2_2() -> None:
    body = create_chat_message_request(
        content=["a", FileInput("f")], busy_behavior="interrupt", mcp_server_ids=[], plan_mode=""
    )
    assert body.to_json() == {
        "content": [{"type": "text", "text": "a"}, {"type": "file", "file_id": "f"}],
        "busy_behavior": "interrupt",
        "mcp_server_ids": [],
        "plan_mode": "",
    }
    given_body = CreateChatMessageRequest(content=(TextInput("x"),))
    assert create_chat_message_request(given_body) is given_body


@pytest.mark.parametrize(
    ("args", "kwargs", "match"),
    [
        ((CreateChatMessageRequest(content=()),), {"busy_behavior": "queue"}, "not both"),
        (("body",), {}, "CreateChatMessageRequest"),
        ((), {}, "content"),
        ((), {"content": "x", "busy_behavior": "later"}, "busy_behavior"),
        ((), {"content": "x", "reasoning_effort": 1}, "reasoning_effort"),
    ],
)
def test_create_chat_message_request_refuses_bad_arguments(
    args: tuple[Any, ...], kwargs: dict[str, Any], match: str
) -> None:
    with pytest.raises(CoderAgentError, match=match):
        create_chat_message_request(*args, **kwargs)


def test_tool_results_pass_through_exactly_as_given_d5() -> None:
    a = ToolResultInput(tool_call_id="a", output={"x": 1})
    b = ToolOutcome(tool_call_id="b", output="boom", is_error=True)
    assert tool_result_inputs([a, b, a]) == (
        a,
        ToolResultInput(tool_call_id="b", output="boom", is_error=True),
        a,
    )
    assert tool_result_inputs(b) == (
        ToolResultInput(tool_call_id="b", output="boom", is_error=True),
    )
    assert tool_result_inputs([]) == ()


@pytest.mark.parametrize("bad", ["results", 3, [{"tool_call_id": "a"}]])
def test_tool_results_of_the_wrong_type_are_refused(bad: Any) -> None:
    with pytest.raises(CoderAgentError, match="ToolResultInput"):
        tool_result_inputs(bad)


# -- model configs (wire 8, D16) ----------------------------------------------------------------

ORG_MODELS = f"GET /api/v2/organizations/{ORG}/chats/models"
LEGACY_MODELS = "GET /api/experimental/chats/model-configs"
CATALOG = {
    "models": [
        {"id": UUID, "model": "claude-sonnet-4-6", "display_name": "Claude Sonnet 4.6",
         "ai_provider_id": "p1"},
        {"id": "cfg-gpt", "model": "gpt-5", "display_name": "GPT-5", "ai_provider_id": "p2"},
    ],
    "providers": [{"id": "p1", "type": "anthropic"}, {"id": "p2", "type": "openai"}],
}  # fmt: skip


def test_listing_uses_the_org_route_and_never_touches_the_prefix_d16() -> None:
    w = World({ORG_MODELS: Respond(200, CATALOG)})
    job = ModelConfigsJob(w.selector, ORG, now=w.now)
    configs = w.run(job)
    assert [(c.model, c.provider) for c in configs] == [
        ("claude-sonnet-4-6", "anthropic"),
        ("gpt-5", "openai"),
    ]
    assert job.source == "org" and w.ops() == ["list_model_configs"]
    assert w.selector.prefix is None


def test_listing_falls_back_to_the_legacy_route_once_on_404_d16() -> None:
    legacy = [
        {"id": "l1", "model": "m1", "organization_id": ORG},
        {"id": "l2", "model": "m2", "organization_id": "another-org"},
        "junk",
    ]
    w = World({ORG_MODELS: Respond(404), LEGACY_MODELS: Respond(200, legacy)})
    job = ModelConfigsJob(w.selector, ORG, now=w.now)
    assert [c.id for c in w.run(job)] == ["l1"]
    assert job.source == "legacy" and w.routes() == [ORG_MODELS, LEGACY_MODELS]
    assert w.selector.prefix is None


def test_listing_raises_the_org_route_error_when_both_routes_404_wire_8() -> None:
    w = World({ORG_MODELS: Respond(404, {"message": "org route"}), LEGACY_MODELS: Respond(404)})
    with pytest.raises(CoderApiError) as info:
        w.run(ModelConfigsJob(w.selector, ORG, now=w.now))
    assert info.value.path == ORG_MODELS.split(" ")[1] and info.value.server_message == "org route"


def test_resolving_a_uuid_hint_makes_no_request_wire_8() -> None:
    w = World()
    assert w.run(ResolveModelJob(w.selector, UUID.upper(), ORG, now=w.now)) == UUID.upper()
    assert w.routes() == []


@pytest.mark.parametrize(
    ("hint", "expected"),
    [
        ("gpt-5", "cfg-gpt"),
        ("anthropic:claude-sonnet-4-6", UUID),
        ("Claude Sonnet", UUID),
        ("sonnet", UUID),
        ("llama", None),
    ],
)
def test_resolving_a_hint_lists_with_its_own_op(hint: str, expected: str | None) -> None:
    w = World({ORG_MODELS: Respond(200, CATALOG)})
    assert w.run(ResolveModelJob(w.selector, hint, ORG, now=w.now)) == expected
    assert w.ops() == ["resolve_model_config_id"]


def test_model_jobs_validate_their_arguments() -> None:
    with pytest.raises(CoderAgentError, match="hint"):
        ResolveModelJob(PrefixSelector(), 3, ORG, now=0.0)  # type: ignore[arg-type]
    with pytest.raises(CoderAgentError, match="organization_id"):
        ModelConfigsJob(PrefixSelector(), "", now=0.0)


# -- workspaces (wire 9) ------------------------------------------------------------------------

WS = "ws-1"
WORKSPACE = {
    "id": WS,
    "name": "dev",
    "owner_name": "alice",
    "latest_build": {"resources": [{"agents": [{"name": "main"}]}]},
}
WS_ROUTE = f"GET /api/v2/workspaces/{WS}"
HOST_ROUTE = "GET /api/v2/applications/host"
SHARE_ROUTE = f"POST /api/v2/workspaces/{WS}/port-share"


def preview_world(**extra: Any) -> World:
    rest = {
        WS_ROUTE: Respond(200, WORKSPACE),
        HOST_ROUTE: Respond(200, {"host": "*.apps.example.com"}),
    }
    rest.update(extra)
    return World(rest)


def test_preview_url_composes_the_subdomain_url_wire_9() -> None:
    w = preview_world()
    preview = w.run(
        PreviewJob(w.selector, base_url="https://coder.test", workspace_id=WS, port=3000, now=w.now)
    )
    assert preview.url == "https://3000--main--dev--alice.apps.example.com"
    assert (preview.agent_name, preview.share_level, preview.protocol) == ("main", None, "http")
    assert w.selector.prefix is None


def test_preview_lookups_run_concurrently_wire_9() -> None:
    w = preview_world(**{WS_ROUTE: Respond(200, WORKSPACE, delay=1.0)})
    w.run(PreviewJob(w.selector, base_url="https://c.test", workspace_id=WS, port=3000, now=w.now))
    assert [s.at for s in w.driver.sent] == [w.driver.sent[0].at] * 2


def test_https_apps_get_the_s_label_suffix_but_keep_the_deployment_scheme() -> None:
    w = preview_world()
    preview = w.run(
        PreviewJob(
            w.selector,
            base_url="http://coder.test",
            workspace_id=WS,
            port=8443,
            protocol="https",
            agent_name="other",
            now=w.now,
        )
    )
    assert preview.url == "http://8443s--other--dev--alice.apps.example.com"


def test_share_port_upserts_then_reports_the_level_in_effect_wire_9() -> None:
    w = preview_world(
        **{
            SHARE_ROUTE: Respond(
                200,
                {"workspace_id": WS, "agent_name": "main", "port": 3000,
                 "share_level": "public", "protocol": "http"},
            )
        }
    )  # fmt: skip
    preview = w.run(
        PreviewJob(
            w.selector,
            base_url="https://c.test",
            workspace_id=WS,
            port=3000,
            share_level="organization",
            now=w.now,
        )
    )
    assert preview.share_level == "public" and preview.share is not None
    (share_request,) = [r for r in w.driver.requests() if r.method == "POST"]
    assert share_request.json == {
        "agent_name": "main",
        "port": 3000,
        "share_level": "organization",
        "protocol": "http",
    }


def test_share_port_404_says_sharing_is_unavailable_wire_9() -> None:
    w = preview_world(**{SHARE_ROUTE: Respond(404)})
    with pytest.raises(CoderApiError, match="port sharing is unavailable"):
        w.run(
            PreviewJob(
                w.selector,
                base_url="https://c.test",
                workspace_id=WS,
                port=3000,
                share_level="public",
                now=w.now,
            )
        )


def test_a_failed_workspace_lookup_abandons_the_host_lookup() -> None:
    w = preview_world(**{WS_ROUTE: Respond(404), HOST_ROUTE: Hang()})
    with pytest.raises(CoderApiError) as info:
        w.run(
            PreviewJob(w.selector, base_url="https://c.test", workspace_id=WS, port=3000, now=w.now)
        )
    assert info.value.status == 404
    assert [s.cancelled for s in w.driver.sent] == [False, True]


def test_no_wildcard_host_is_explained() -> None:
    w = preview_world(**{HOST_ROUTE: Respond(200, {"host": ""})})
    with pytest.raises(CoderAgentError, match="wildcard"):
        w.run(
            PreviewJob(w.selector, base_url="https://c.test", workspace_id=WS, port=3000, now=w.now)
        )


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"port": 80}, "cannot be previewed"),
        ({"port": 70000}, "not a valid TCP port"),
        ({"protocol": "ftp"}, "protocol"),
        ({"agent_name": ""}, "agent_name"),
        ({"share_level": "owner"}, "owner"),
        ({"share_level": "everyone"}, "share_level"),
        ({"workspace_id": ""}, "workspace_id"),
    ],
)
def test_preview_arguments_are_checked_before_any_request(
    kwargs: dict[str, Any], match: str
) -> None:
    args: dict[str, Any] = {"base_url": "https://c.test", "workspace_id": WS, "port": 3000}
    args.update(kwargs)
    with pytest.raises(CoderAgentError, match=match):
        PreviewJob(PrefixSelector(), now=0.0, **args)


# -- uploads (wire 7, D20) ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "media_type"),
    [
        ("report.PDF", "application/pdf"),
        ("dir/notes.md", "text/markdown"),
        ("c:\\\\x\\\\photo.jpeg", "image/jpeg"),
        ("a.JPG", "image/jpeg"),
        ("data.csv", "text/csv"),
        ("archive.zip", None),
        ("README", None),
        ("", None),
        (None, None),
    ],
)
def test_media_types_are_guessed_from_allowlisted_extensions(
    name: str | None, media_type: str | None
) -> None:
    assert guess_media_type(name) == media_type


def test_bytes_upload_plan_builds_the_request_with_content_disposition_d20() -> None:
    plan = plan_upload(b"%PDF", filename="résumé.pdf")
    assert plan.data == b"%PDF" and plan.media_type == "application/pdf"
    request = plan.request(ORG, plan.data)
    headers = dict(request.headers)
    assert headers["Content-Type"] == "application/pdf"
    assert headers["Content-Disposition"] == (
        "attachment; filename=\"r_sum_.pdf\"; filename*=UTF-8''r%C3%A9sum%C3%A9.pdf"
    )
    assert request.path == f"{V2}/files?organization={ORG}"


def test_a_path_plan_names_the_file_after_its_base_name(tmp_path: pathlib.Path) -> None:
    path = tmp_path / "notes.txt"
    plan = plan_upload(path)
    assert (plan.path, plan.filename, plan.media_type) == (str(path), "notes.txt", "text/plain")
    plan = plan_upload(str(path), media_type="text/markdown", filename="x.md")
    assert (plan.filename, plan.media_type) == ("x.md", "text/markdown")


def test_a_file_object_plan_uses_its_name() -> None:
    handle = io.BytesIO(b"{}")
    handle.name = "/tmp/data.json"  # type: ignore[attr-defined]
    plan = plan_upload(handle)
    assert plan.stream is handle and plan.filename == "data.json"
    assert plan.media_type == "application/json"
    named = plan_upload(handle, filename="given.csv")
    assert (named.filename, named.media_type) == ("given.csv", "text/csv")
    anonymous = plan_upload(io.BytesIO(b"x"))
    assert anonymous.filename is None and anonymous.media_type is None
    with pytest.raises(CoderAgentError, match="Could not determine"):
        anonymous.request(ORG, b"x")


@pytest.mark.parametrize(
    ("content", "kwargs", "match"),
    [
        (3, {}, "Unsupported file content"),
        ("", {}, "path"),
        (b"x", {"media_type": 3}, "media_type"),
        (b"x", {"filename": 3}, "filename"),
    ],
)
def test_bad_upload_content_is_refused(content: Any, kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(CoderAgentError, match=match):
        plan_upload(content, **kwargs)


def test_a_file_object_that_returns_text_is_refused() -> None:
    plan = UploadPlan(stream=io.StringIO("x"), media_type="text/plain")
    with pytest.raises(CoderAgentError, match="binary mode"):
        plan.request(ORG, "x")


def test_disallowed_and_oversized_uploads_fail_before_a_request_wire_7() -> None:
    with pytest.raises(CoderAgentError, match='Media type "application/zip" is not allowed'):
        plan_upload(b"PK", media_type="application/zip").request(ORG, b"PK")
    big = b"\0" * (10 * 1024 * 1024 + 1)
    with pytest.raises(CoderAgentError, match="10485761 bytes"):
        plan_upload(big, media_type="text/plain").request(ORG, big)
    exact = b"\0" * (10 * 1024 * 1024)
    assert plan_upload(exact, media_type="text/plain").request(ORG, exact).body == exact


def test_upload_result_needs_a_file_id_wire_2() -> None:
    request = plan_upload(b"x", media_type="text/plain").request(ORG, b"x")
    assert upload_result(request, HttpResponse(status=201, body=b'{"id": "f1"}')) == "f1"
    with pytest.raises(CoderApiError, match="no file id"):
        upload_result(request, HttpResponse(status=201, body=b"{}"))


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=40))
def test_any_file_name_gives_a_header_safe_content_disposition_d20(name: str) -> None:
    plan = plan_upload(b"x", media_type="text/plain", filename=name or None)
    header = dict(plan.request(ORG, b"x").headers)["Content-Disposition"]
    assert header.startswith("attachment; filename=")
    assert all(0x20 <= ord(c) <= 0x7E for c in header)


def test_d33_create_chat_request_without_an_organization_holds_a_stand_in() -> None:
    # The client's default organization replaces it before the request is sent.
    body = create_chat_request(content="x")
    assert body.organization_id == UNKNOWN_ORGANIZATION
