"""Workspace preview URLs and port sharing: the pure pieces (wire 9).

These helpers use the stable ``/api/v2`` workspace APIs, never the chat prefix, and emit no
transport events. A preview URL needs two lookups (run them concurrently): the workspace
(``build_get_workspace``) and the deployment's wildcard app host (``build_get_app_host``).
Then ``select_agent`` picks the agent and ``preview_url`` composes::

    <scheme of base_url>//<host with every "*" replaced by the label>
    label = {port}{"s" if protocol == "https"}--{agent}--{workspace name}--{owner name}

Sharing upserts the port's share level first (``build_share_port`` / ``parse_share_port``).
"""

from __future__ import annotations

from typing import Any, Final, Literal
from urllib.parse import quote, unquote, urlsplit

import attrs

from .._errors import CoderAgentError, CoderApiError, CoderProtocolError
from .http import HttpRequest, HttpResponse
from .routes import check_chat_id, ensure_ok

__all__ = [
    "MIN_PREVIEW_PORT",
    "NO_WILDCARD_HOST_MESSAGE",
    "PORT_SHARE_UNAVAILABLE_DETAIL",
    "PORT_SHARE_UNAVAILABLE_MESSAGE",
    "PROTOCOLS",
    "SHARE_LEVELS",
    "PortShare",
    "WorkspaceInfo",
    "build_get_app_host",
    "build_get_workspace",
    "build_share_port",
    "check_preview_port",
    "parse_get_app_host",
    "parse_get_workspace",
    "parse_share_port",
    "preview_label",
    "preview_url",
    "select_agent",
]

ShareLevel = Literal["authenticated", "organization", "public"]
Protocol = Literal["http", "https"]

#: Levels accepted on upsert; ``owner`` is not (unsharing means deleting the share).
SHARE_LEVELS: Final = ("authenticated", "organization", "public")
PROTOCOLS: Final = ("http", "https")
#: Subdomain app URLs only encode 4-5 digit ports (wire 9).
MIN_PREVIEW_PORT: Final = 1000
MAX_PORT: Final = 65535

PORT_SHARE_UNAVAILABLE_MESSAGE: Final = "port sharing is unavailable"
PORT_SHARE_UNAVAILABLE_DETAIL: Final = (
    "the workspace was not found, or this Coder server predates port sharing (added in Coder v2.9)"
)
NO_WILDCARD_HOST_MESSAGE: Final = (
    "This Coder deployment has no wildcard app host configured (--wildcard-access-url), "
    "so subdomain preview URLs are unavailable."
)


# -- validation ------------------------------------------------------------------------------


def check_preview_port(port: object) -> int:
    """Return ``port`` when it can be previewed: an integer from 1000 to 65535 (wire 9).
    Raises ``CoderAgentError``: a non-port says so; a port below 1000 explains that subdomain
    URLs only encode 4-5 digit ports."""
    if type(port) is not int or not 1 <= port <= MAX_PORT:
        raise CoderAgentError(
            f"Port {port!r} is not a valid TCP port: expected an integer from 1 to {MAX_PORT}."
        )
    if port < MIN_PREVIEW_PORT:
        raise CoderAgentError(
            f"Port {port} cannot be previewed: Coder subdomain app URLs only encode 4-5 digit "
            f'ports (1000-65535), so "{port}--<agent>--..." would be read as an app named '
            f'"{port}" and never resolve; serve the preview on port 1000 or higher.'
        )
    return port


def _check_protocol(protocol: object) -> Protocol:
    if protocol == "http":
        return "http"
    if protocol == "https":
        return "https"
    raise CoderAgentError(f'protocol must be "http" or "https", got {protocol!r}')


def _check_share_level(level: object) -> ShareLevel:
    if level == "owner":
        raise CoderAgentError(
            'share_level "owner" cannot be set on a port share; delete the share to make the '
            "port private to the workspace owner again"
        )
    if level == "authenticated":
        return "authenticated"
    if level == "organization":
        return "organization"
    if level == "public":
        return "public"
    raise CoderAgentError(f"share_level must be one of {', '.join(SHARE_LEVELS)}, got {level!r}")


# -- workspace lookup ------------------------------------------------------------------------


def _opt_str(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    return value if type(value) is str and value else None


def _agent_names(workspace: dict[str, Any]) -> tuple[str, ...]:
    build = workspace.get("latest_build")
    resources = build.get("resources") if type(build) is dict else None
    names: list[str] = []
    for resource in resources if type(resources) is list else ():
        agents = resource.get("agents") if type(resource) is dict else None
        for agent in agents if type(agents) is list else ():
            name = _opt_str(agent, "name") if type(agent) is dict else None
            if name is not None and name not in names:
                names.append(name)
    return tuple(names)


@attrs.frozen(kw_only=True)
class WorkspaceInfo:
    """What the preview needs from ``GET /api/v2/workspaces/{id}`` (wire 9): every field is
    optional along the chain, and ``agent_names`` lists the agents of the latest build's
    resources in order (each name once)."""

    id: str | None = None
    name: str | None = None
    owner_name: str | None = None
    agent_names: tuple[str, ...] = ()
    raw: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)

    @classmethod
    def from_json(cls, obj: Any) -> WorkspaceInfo:
        if type(obj) is not dict:
            raise CoderProtocolError("malformed workspace: expected a JSON object")
        return cls(
            id=_opt_str(obj, "id"),
            name=_opt_str(obj, "name"),
            owner_name=_opt_str(obj, "owner_name"),
            agent_names=_agent_names(obj),
            raw=obj,
        )

    @property
    def display_name(self) -> str:
        if self.owner_name and self.name:
            return f"{self.owner_name}/{self.name}"
        return self.name or self.id or "(unknown)"


def _workspace_route(workspace_id: str, *suffix: str) -> str:
    seg = quote(check_chat_id(workspace_id, "workspace_id"), safe="")
    return "/".join(("/api/v2/workspaces", seg, *suffix))


def _shape_error(
    request: HttpRequest, response: HttpResponse, exc: CoderProtocolError
) -> CoderProtocolError:
    return CoderProtocolError(
        f"Coder API {request.method} {request.path} returned an unexpected body "
        f"({response.status}): {exc.message}"
    )


def build_get_workspace(workspace_id: str) -> HttpRequest:
    """``GET /api/v2/workspaces/{workspace_id}`` (op ``get_workspace``)."""
    return HttpRequest.build("get_workspace", "GET", _workspace_route(workspace_id))


def parse_get_workspace(request: HttpRequest, response: HttpResponse) -> WorkspaceInfo:
    """The ``WorkspaceInfo``; a non-2xx raises its ``CoderApiError`` (wire 9, 10)."""
    ensure_ok(request, response)
    try:
        return WorkspaceInfo.from_json(response.document())
    except CoderProtocolError as exc:
        raise _shape_error(request, response, exc) from exc


def build_get_app_host() -> HttpRequest:
    """``GET /api/v2/applications/host`` (op ``get_app_host``)."""
    return HttpRequest.build("get_app_host", "GET", "/api/v2/applications/host")


def parse_get_app_host(request: HttpRequest, response: HttpResponse) -> str:
    """The wildcard app host (e.g. ``*.apps.example.com``); ``""`` means none is configured
    (a missing or non-string ``host`` counts as none)."""
    ensure_ok(request, response)
    body = response.json()
    host = body.get("host") if type(body) is dict else None
    return host if type(host) is str else ""


# -- composing the URL -----------------------------------------------------------------------


def select_agent(workspace: WorkspaceInfo, agent_name: str | None = None) -> str:
    """The agent to preview (wire 9): ``agent_name`` when given; otherwise the workspace's
    only agent. Zero or several agents raise ``CoderAgentError`` (several: the candidates are
    listed)."""
    if agent_name is not None:
        if type(agent_name) is not str or not agent_name:
            raise CoderAgentError(f"agent_name must be a non-empty string, got {agent_name!r}")
        return agent_name
    names = workspace.agent_names
    if len(names) == 1:
        return names[0]
    if not names:
        raise CoderAgentError(
            f'Workspace "{workspace.display_name}" has no agents in its latest build '
            "(is it running?); pass agent_name explicitly."
        )
    raise CoderAgentError(
        f'Workspace "{workspace.display_name}" has {len(names)} agents '
        f"({', '.join(names)}); pass agent_name to choose one."
    )


def preview_label(
    port: int, agent_name: str, workspace: WorkspaceInfo, *, protocol: str = "http"
) -> str:
    """``{port}{s if https}--{agent}--{workspace name}--{owner name}`` (wire 9). The port is
    checked with ``check_preview_port``; a workspace without a name or owner name cannot be
    addressed and raises ``CoderProtocolError``."""
    port = check_preview_port(port)
    suffix = "s" if _check_protocol(protocol) == "https" else ""
    if not workspace.name or not workspace.owner_name:
        raise CoderProtocolError(
            "the workspace lookup returned no name or owner_name, so no preview URL can be built"
        )
    return f"{port}{suffix}--{agent_name}--{workspace.name}--{workspace.owner_name}"


def preview_url(base_url: str, host: str, label: str) -> str:
    """``<scheme of base_url>//`` + ``host`` with **every** ``*`` replaced by ``label``
    (the host may carry a port). An empty host raises ``CoderAgentError``: the deployment has
    no wildcard access URL (wire 9). The scheme is the deployment's, whatever protocol the app
    speaks inside the workspace."""
    if not host:
        raise CoderAgentError(NO_WILDCARD_HOST_MESSAGE)
    scheme = urlsplit(base_url).scheme if type(base_url) is str else ""
    if not scheme:
        raise CoderAgentError(f"base_url must be an absolute URL, got {base_url!r}")
    return f"{scheme}://{host.replace('*', label)}"


# -- port sharing ----------------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class PortShare:
    """The share in effect after an upsert. ``share_level`` follows wire 9: the server's level
    when it reports one other than ``owner``, otherwise the level requested."""

    workspace_id: str
    agent_name: str
    port: int
    share_level: str
    protocol: str
    raw: dict[str, Any] = attrs.field(factory=dict, eq=False, repr=False)


def build_share_port(
    workspace_id: str,
    *,
    agent_name: str,
    port: int,
    share_level: str = "authenticated",
    protocol: str = "http",
) -> HttpRequest:
    """``POST /api/v2/workspaces/{id}/port-share`` with ``{agent_name, port, share_level,
    protocol}`` (op ``share_port``). Defaults: ``authenticated`` and ``http`` (wire 9). The
    port must be previewable; ``owner`` is refused (unsharing means deleting the share)."""
    if type(agent_name) is not str or not agent_name:
        raise CoderAgentError(f"agent_name must be a non-empty string, got {agent_name!r}")
    body = {
        "agent_name": agent_name,
        "port": check_preview_port(port),
        "share_level": _check_share_level(share_level),
        "protocol": _check_protocol(protocol),
    }
    return HttpRequest.build(
        "share_port", "POST", _workspace_route(workspace_id, "port-share"), json=body
    )


def parse_share_port(request: HttpRequest, response: HttpResponse) -> PortShare:
    """The ``PortShare`` in effect (wire 9). A 404 is re-raised as ``CoderApiError(404, POST,
    path, "port sharing is unavailable")`` with the detail explaining that the workspace was not
    found or the server predates port sharing; any other non-2xx raises its own error."""
    if response.status == 404:
        raise CoderApiError(
            status=404,
            method=request.method,
            path=request.path,
            server_message=PORT_SHARE_UNAVAILABLE_MESSAGE,
            detail=PORT_SHARE_UNAVAILABLE_DETAIL,
        )
    ensure_ok(request, response)
    sent: dict[str, Any] = request.json if type(request.json) is dict else {}
    body = response.json()
    answer: dict[str, Any] = body if type(body) is dict else {}
    level = answer.get("share_level")
    if type(level) is not str or not level or level == "owner":
        level = sent.get("share_level", "authenticated")
    workspace_id = _opt_str(answer, "workspace_id")
    if workspace_id is None:
        route = request.path.partition("?")[0]
        workspace_id = unquote(route.removeprefix("/api/v2/workspaces/").partition("/")[0])
    port = answer.get("port")
    return PortShare(
        workspace_id=workspace_id,
        agent_name=_opt_str(answer, "agent_name") or str(sent.get("agent_name", "")),
        port=port if type(port) is int else int(sent.get("port", 0)),
        share_level=level,
        protocol=_opt_str(answer, "protocol") or str(sent.get("protocol", "http")),
        raw=answer,
    )
