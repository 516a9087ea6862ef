"""Workspace previews and port sharing (wire 9)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import CoderAgentError, CoderApiError, CoderProtocolError
from coder_proto._rest.http import HttpResponse
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._rest.workspaces import (
    PortShare,
    WorkspaceInfo,
    build_get_app_host,
    build_get_workspace,
    build_share_port,
    check_preview_port,
    parse_get_app_host,
    parse_get_workspace,
    parse_share_port,
    preview_label,
    preview_url,
    select_agent,
)

WORKSPACE = {
    "id": "w1",
    "name": "dev",
    "owner_name": "alice",
    "latest_build": {
        "resources": [
            {"agents": [{"name": "main"}]},
            {"name": "disk"},
            "junk",
            {"agents": "nope"},
            {"agents": [{"name": ""}, 3, {"id": "no-name"}, {"name": "main"}]},
        ]
    },
}


def reply(status: int, body: Any = None) -> HttpResponse:
    return HttpResponse(status=status, body=b"" if body is None else json.dumps(body).encode())


def ws(*agents: str, name: str | None = "dev", owner: str | None = "alice") -> WorkspaceInfo:
    return WorkspaceInfo(id="w1", name=name, owner_name=owner, agent_names=agents)


# -- ports -----------------------------------------------------------------------------------


@pytest.mark.parametrize("port", [1000, 3000, 65535])
def test_wire_9_previewable_ports(port: int) -> None:
    assert check_preview_port(port) == port


@pytest.mark.parametrize("port", [1, 80, 999])
def test_wire_9_ports_below_1000_are_rejected_with_the_reason(port: int) -> None:
    with pytest.raises(CoderAgentError) as info:
        check_preview_port(port)
    assert str(info.value).startswith(
        f"Port {port} cannot be previewed: Coder subdomain app URLs only encode 4-5 digit ports "
        "(1000-65535)"
    )


@pytest.mark.parametrize("port", [0, -1, 65536, 3000.0, "3000", True, None])
def test_wire_9_non_ports_are_rejected(port: Any) -> None:
    with pytest.raises(
        CoderAgentError, match="not a valid TCP port: expected an integer from 1 to 65535"
    ):
        check_preview_port(port)


# -- workspace lookup and app host -----------------------------------------------------------


def test_wire_9_workspace_lookup() -> None:
    request = build_get_workspace("w/1")
    assert (request.op, request.method, request.path, request.body) == (
        "get_workspace",
        "GET",
        "/api/v2/workspaces/w%2F1",
        None,
    )
    info = parse_get_workspace(request, reply(200, WORKSPACE))
    assert (info.id, info.name, info.owner_name, info.agent_names) == (
        "w1",
        "dev",
        "alice",
        ("main",),
    )
    assert info.raw == WORKSPACE


@pytest.mark.parametrize(
    "body",
    [
        {},
        {"latest_build": None},
        {"latest_build": {"resources": None}},
        {"name": 5, "owner_name": ""},
    ],
)
def test_wire_9_every_field_is_optional_along_the_chain(body: Any) -> None:
    info = parse_get_workspace(build_get_workspace("w1"), reply(200, body))
    assert (info.id, info.name, info.owner_name, info.agent_names) == (None, None, None, ())


def test_workspace_lookup_errors() -> None:
    request = build_get_workspace("w1")
    with pytest.raises(CoderProtocolError, match="unexpected body"):
        parse_get_workspace(request, reply(200, ["x"]))
    with pytest.raises(CoderApiError) as info:
        parse_get_workspace(
            request,
            reply(
                404, {"message": "Resource not found or you do not have access to this resource"}
            ),
        )
    assert (info.value.status, info.value.path) == (404, "/api/v2/workspaces/w1")
    with pytest.raises(CoderApiError) as info:
        parse_get_workspace(request, HttpResponse(status=418, body=b"", reason=""))
    assert info.value.server_message == "I'm a Teapot"
    with pytest.raises(CoderAgentError, match="workspace_id"):
        build_get_workspace("")


def test_wire_9_app_host() -> None:
    request = build_get_app_host()
    assert (request.op, request.method, request.path) == (
        "get_app_host",
        "GET",
        "/api/v2/applications/host",
    )
    assert (
        parse_get_app_host(request, reply(200, {"host": "*.apps.example.com"}))
        == "*.apps.example.com"
    )
    for body in ({"host": ""}, {}, {"host": 3}, None, []):
        assert parse_get_app_host(request, reply(200, body)) == ""
    with pytest.raises(CoderApiError):
        parse_get_app_host(request, reply(401, {"message": "no"}))


def test_wire_9_workspace_helpers_never_touch_the_prefix() -> None:
    selector = PrefixSelector()
    for request in (build_get_workspace("w1"), build_get_app_host()):
        exchange = selector.begin(request)
        assert exchange.request == request
        exchange.on_response(reply(200, {}))
    assert selector.prefix is None


# -- agents, labels and URLs -----------------------------------------------------------------


def test_wire_9_agent_selection() -> None:
    assert select_agent(ws("main")) == "main"
    assert select_agent(ws("a", "b"), "b") == "b"
    assert select_agent(ws(), "explicit") == "explicit"


def test_wire_9_no_agents() -> None:
    with pytest.raises(CoderAgentError) as info:
        select_agent(ws())
    assert str(info.value) == (
        'Workspace "alice/dev" has no agents in its latest build (is it running?); '
        "pass agent_name explicitly."
    )


def test_wire_9_several_agents_lists_the_candidates() -> None:
    with pytest.raises(CoderAgentError) as info:
        select_agent(ws("main", "gpu"))
    assert (
        str(info.value)
        == 'Workspace "alice/dev" has 2 agents (main, gpu); pass agent_name to choose one.'
    )
    with pytest.raises(CoderAgentError, match='Workspace "w1" has no agents'):
        select_agent(WorkspaceInfo(id="w1"))
    with pytest.raises(CoderAgentError, match='Workspace "dev" has no agents'):
        select_agent(WorkspaceInfo(name="dev"))
    with pytest.raises(CoderAgentError, match=r'Workspace "\(unknown\)"'):
        select_agent(WorkspaceInfo())
    with pytest.raises(CoderAgentError, match="agent_name"):
        select_agent(ws("a"), "")


def test_wire_9_label() -> None:
    assert preview_label(3000, "main", ws()) == "3000--main--dev--alice"
    assert preview_label(3000, "main", ws(), protocol="https") == "3000s--main--dev--alice"
    with pytest.raises(CoderAgentError, match="protocol"):
        preview_label(3000, "main", ws(), protocol="ftp")
    with pytest.raises(CoderAgentError, match="cannot be previewed"):
        preview_label(80, "main", ws())
    for incomplete in (ws(name=None), ws(owner=None)):
        with pytest.raises(CoderProtocolError, match="no name or owner_name"):
            preview_label(3000, "main", incomplete)


def test_wire_9_url_replaces_every_star_and_keeps_the_base_scheme() -> None:
    label = "3000--main--dev--alice"
    assert preview_url("https://coder.example.com/", "*.apps.example.com", label) == (
        "https://3000--main--dev--alice.apps.example.com"
    )
    assert preview_url("http://localhost:3000", "*--*.apps:8443", "L") == "http://L--L.apps:8443"


def test_wire_9_url_errors() -> None:
    with pytest.raises(CoderAgentError) as info:
        preview_url("https://c", "", "L")
    assert str(info.value) == (
        "This Coder deployment has no wildcard app host configured (--wildcard-access-url), "
        "so subdomain preview URLs are unavailable."
    )
    with pytest.raises(CoderAgentError, match="base_url"):
        preview_url("coder.example.com", "*.apps", "L")
    with pytest.raises(CoderAgentError, match="base_url"):
        preview_url(None, "*.apps", "L")  # type: ignore[arg-type]


@settings(max_examples=200, deadline=None)
@given(host=st.text(alphabet="*.a-:1", max_size=12).filter(bool), port=st.integers(1000, 65535))
def test_wire_9_url_property(host: str, port: int) -> None:
    label = preview_label(port, "main", ws())
    url = preview_url("https://c", host, label)
    assert url == "https://" + host.replace("*", label)
    assert "*" not in url


# -- port sharing ----------------------------------------------------------------------------


def test_wire_9_share_port_request_defaults() -> None:
    request = build_share_port("w1", agent_name="main", port=3000)
    assert (request.op, request.method, request.path) == (
        "share_port",
        "POST",
        "/api/v2/workspaces/w1/port-share",
    )
    assert request.json == {
        "agent_name": "main",
        "port": 3000,
        "share_level": "authenticated",
        "protocol": "http",
    }
    assert ("Content-Type", "application/json") in request.headers


@pytest.mark.parametrize("level", ["authenticated", "organization", "public"])
def test_wire_9_share_levels(level: str) -> None:
    request = build_share_port(
        "w1", agent_name="main", port=3000, share_level=level, protocol="https"
    )
    assert request.json["share_level"] == level
    assert request.json["protocol"] == "https"


def test_wire_9_share_port_rejects_bad_arguments() -> None:
    with pytest.raises(CoderAgentError, match='"owner" cannot be set'):
        build_share_port("w1", agent_name="main", port=3000, share_level="owner")
    with pytest.raises(CoderAgentError, match="share_level must be one of"):
        build_share_port("w1", agent_name="main", port=3000, share_level="everyone")
    with pytest.raises(CoderAgentError, match="protocol"):
        build_share_port("w1", agent_name="main", port=3000, protocol="tcp")
    with pytest.raises(CoderAgentError, match="cannot be previewed"):
        build_share_port("w1", agent_name="main", port=80)
    with pytest.raises(CoderAgentError, match="agent_name"):
        build_share_port("w1", agent_name="", port=3000)
    with pytest.raises(CoderAgentError, match="workspace_id"):
        build_share_port(" ", agent_name="a", port=3000)


def test_wire_9_returned_level_is_the_servers_unless_owner_or_missing() -> None:
    request = build_share_port("w1", agent_name="main", port=3000, share_level="organization")
    answer = {
        "workspace_id": "w1",
        "agent_name": "main",
        "port": 3000,
        "share_level": "public",
        "protocol": "http",
    }
    share = parse_share_port(request, reply(200, answer))
    assert share == PortShare(
        workspace_id="w1", agent_name="main", port=3000, share_level="public", protocol="http"
    )
    for level in ("owner", None, "", 3):
        assert (
            parse_share_port(request, reply(200, {**answer, "share_level": level})).share_level
            == "organization"
        )


def test_share_port_falls_back_to_the_request_for_missing_fields() -> None:
    request = build_share_port("w 1", agent_name="main", port=4000, protocol="https")
    share = parse_share_port(request, reply(200))
    assert share == PortShare(
        workspace_id="w 1",
        agent_name="main",
        port=4000,
        share_level="authenticated",
        protocol="https",
    )


def test_wire_9_share_404_is_reraised_as_port_sharing_unavailable() -> None:
    request = build_share_port("w1", agent_name="main", port=3000)
    with pytest.raises(CoderApiError) as info:
        parse_share_port(request, reply(404, {"message": "Not Found"}))
    error = info.value
    assert (error.status, error.method, error.path) == (
        404,
        "POST",
        "/api/v2/workspaces/w1/port-share",
    )
    assert error.server_message == "port sharing is unavailable"
    assert error.detail == (
        "the workspace was not found, or this Coder server predates port sharing (added in Coder v2.9)"
    )
    assert str(error) == (
        "Coder API POST /api/v2/workspaces/w1/port-share failed (404): port sharing is unavailable"
        " — the workspace was not found, or this Coder server predates port sharing "
        "(added in Coder v2.9)"
    )


def test_share_other_errors_raise_themselves() -> None:
    request = build_share_port("w1", agent_name="main", port=3000, share_level="organization")
    with pytest.raises(CoderApiError) as info:
        parse_share_port(request, reply(400, {"message": "Invalid share level", "detail": "d"}))
    assert (info.value.status, info.value.server_message, info.value.detail) == (
        400,
        "Invalid share level",
        "d",
    )
