"""The fake server's route table (server-behaviour 1.1-1.4): which operation a method and path
name, or the 404/405 the server's router answers instead.

The chat routes are mounted under ``/api/v2/chats``, as on the newest server (D36). The
experimental prefix answers 404 for them unless the profile asks for an older deployment:
``experimental_mount`` serves both prefixes (the compatibility window), ``legacy_only`` only
``/api/experimental`` (D16). The model listings are served only where such a server serves them.
Two deployment routes sit beside them under ``/api/v2`` on every profile, as on any Coder
deployment: the signed-in user (``/users/me``, which clients read for the default organization:
D33) and the build information (``/buildinfo``, readable without a session).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Final

import attrs

from ._http import FakeApiError

__all__ = [
    "OPERATIONS",
    "PUBLIC_OPS",
    "READ_ONLY_OPS",
    "ROUTE_NOT_FOUND_MESSAGE",
    "UPGRADE_OPS",
    "RouteMatch",
    "match_route",
]

ROUTE_NOT_FOUND_MESSAGE: Final = "Route not found."

_ID = r"(?P<{}>[^/]+)"

#: Per-prefix chat routes: (method, path suffix pattern, operation). Order matters: the
#: literal segments come before the ``{chat}`` wildcard, as in the server's router.
_CHAT_ROUTES: Final[tuple[tuple[str, str, str], ...]] = (
    ("GET", r"", "list_chats"),
    ("POST", r"", "create_chat"),
    ("GET", r"/watch", "watch_chats"),
    ("GET", r"/by-workspace", "get_chats_by_workspace"),
    ("POST", r"/files", "upload_chat_file"),
    ("GET", r"/files/" + _ID.format("file"), "get_chat_file"),
    ("POST", r"/files/" + _ID.format("file") + r"/download-url", "get_chat_file_download_url"),
    ("GET", r"/files/" + _ID.format("file") + r"/download", "download_chat_file"),
    ("GET", r"/" + _ID.format("chat"), "get_chat"),
    ("PATCH", r"/" + _ID.format("chat"), "update_chat"),
    ("GET", r"/" + _ID.format("chat") + r"/messages", "get_messages"),
    ("POST", r"/" + _ID.format("chat") + r"/messages", "create_chat_message"),
    (
        "PATCH",
        r"/" + _ID.format("chat") + r"/messages/" + _ID.format("message"),
        "edit_chat_message",
    ),
    ("POST", r"/" + _ID.format("chat") + r"/interrupt", "interrupt_chat"),
    ("POST", r"/" + _ID.format("chat") + r"/tool-results", "submit_tool_results"),
    (
        "PATCH",
        r"/" + _ID.format("chat") + r"/queue/" + _ID.format("queued"),
        "edit_queued_message",
    ),
    (
        "DELETE",
        r"/" + _ID.format("chat") + r"/queue/" + _ID.format("queued"),
        "delete_queued_message",
    ),
    (
        "POST",
        r"/" + _ID.format("chat") + r"/queue/" + _ID.format("queued") + r"/promote",
        "promote_queued_message",
    ),
    ("GET", r"/" + _ID.format("chat") + r"/stream", "stream_chat"),
    ("GET", r"/" + _ID.format("chat") + r"/cost", "get_chat_cost"),
    ("GET", r"/" + _ID.format("chat") + r"/prompts", "get_chat_prompts"),
    ("POST", r"/" + _ID.format("chat") + r"/compact", "compact_chat"),
    ("POST", r"/" + _ID.format("chat") + r"/clear", "clear_chat"),
    ("POST", r"/" + _ID.format("chat") + r"/reconcile-invalid", "reconcile_chat"),
    ("POST", r"/" + _ID.format("chat") + r"/title/propose", "propose_chat_title"),
    ("GET", r"/" + _ID.format("chat") + r"/diff", "get_chat_diff"),
    ("PUT", r"/" + _ID.format("chat") + r"/context", "refresh_chat_context"),
)
_COMPILED_CHAT_ROUTES: Final = tuple(
    (method, re.compile(pattern + r"$"), op) for method, pattern, op in _CHAT_ROUTES
)

#: Deployment routes, whole paths, on every profile.
_DEPLOYMENT_ROUTES: Final = (
    ("GET", re.compile(r"^/api/v2/buildinfo$"), "get_buildinfo"),
    ("GET", re.compile(r"^/api/v2/users/" + _ID.format("user") + r"$"), "get_user"),
)

#: Served only under ``/api/experimental/chats`` (server-behaviour 1.1).
_EXPERIMENTAL_ONLY: Final = {
    "/models": "list_models_default_org",
    "/model-configs": "list_model_configs",
}
#: Reserved under ``/api/v2/chats``: 404 instead of falling into ``{chat}``.
_V2_RESERVED: Final = frozenset(
    {"/models", "/model-configs", "/providers", "/user-provider-configs"}
)
_ORG_MODELS: Final = re.compile(
    r"^/api/(?P<api>v2|experimental)/organizations/(?P<org>[^/]+)/chats/models$"
)
_PREFIXES: Final = (("/api/v2/chats", "v2"), ("/api/experimental/chats", "experimental"))

#: Routes that stay readable when the chat daemon is disabled (server-behaviour 1.1); the
#: deployment routes do not depend on it at all.
READ_ONLY_OPS: Final = frozenset(
    {
        "get_chat",
        "list_chats",
        "get_messages",
        "get_chat_file",
        "get_chat_cost",
        "get_chat_prompts",
        "get_chat_diff",
        "get_chats_by_workspace",
        "download_chat_file",
        "get_user",
        "get_buildinfo",
    }
)
#: Routes answered without a session token (a signed download carries a token of its own).
PUBLIC_OPS: Final = frozenset({"get_buildinfo", "download_chat_file"})
#: Routes served as WebSocket upgrades.
UPGRADE_OPS: Final = frozenset({"stream_chat", "watch_chats"})
OPERATIONS: Final = frozenset(
    {op for _, _, op in _CHAT_ROUTES if op not in UPGRADE_OPS}
    | {op for _, _, op in _DEPLOYMENT_ROUTES}
    | set(_EXPERIMENTAL_ONLY.values())
    | {"list_models", "archive_chat"}
)
"""The REST operations a request fault can name (the upgrade routes have faults of their own);
``archive_chat`` is the ``update_chat`` that archives or unarchives a chat.
"""


@attrs.frozen(kw_only=True)
class RouteMatch:
    """A matched route: the operation name, the API (``v2``/``experimental``) and the path
    parameters."""

    op: str
    api: str
    params: Mapping[str, str] = attrs.Factory(dict)


def match_route(
    method: str,
    path: str,
    *,
    legacy_only: bool,
    experimental_mount: bool = False,
    serve_org_models: bool = True,
) -> RouteMatch | FakeApiError:
    """The route for ``method path``: a match, or the 404/405 the server's router gives.

    ``/api/experimental`` serves chat routes only with ``experimental_mount`` (both prefixes)
    or ``legacy_only`` (that prefix alone); otherwise it answers 404, as the newest server does.
    """
    if len(path) > 1 and path.endswith("/"):
        path = path[:-1]
    serve_experimental = legacy_only or experimental_mount
    org = _ORG_MODELS.match(path)
    if org is not None:
        if legacy_only or not serve_org_models:
            return FakeApiError(404, ROUTE_NOT_FOUND_MESSAGE)
        if org.group("api") == "experimental" and not serve_experimental:
            return FakeApiError(404, ROUTE_NOT_FOUND_MESSAGE)
        if method != "GET":
            return FakeApiError(405, "Method not allowed.")
        return RouteMatch(op="list_models", api=org.group("api"), params={"org": org.group("org")})
    for route_method, pattern, op in _DEPLOYMENT_ROUTES:
        found = pattern.match(path)
        if found is not None:
            if method != route_method:
                return FakeApiError(405, "Method not allowed.")
            return RouteMatch(op=op, api="v2", params=found.groupdict())
    for prefix, api in _PREFIXES:
        if path != prefix and not path.startswith(prefix + "/"):
            continue
        if (api == "v2" and legacy_only) or (api == "experimental" and not serve_experimental):
            return FakeApiError(404, ROUTE_NOT_FOUND_MESSAGE)
        rest = path[len(prefix) :]
        if rest in _EXPERIMENTAL_ONLY or rest in _V2_RESERVED:
            if api == "v2" or rest not in _EXPERIMENTAL_ONLY:
                return FakeApiError(404, ROUTE_NOT_FOUND_MESSAGE)
            if method != "GET":
                return FakeApiError(405, "Method not allowed.")
            return RouteMatch(op=_EXPERIMENTAL_ONLY[rest], api=api)
        path_matched = False
        for route_method, pattern, op in _COMPILED_CHAT_ROUTES:
            found = pattern.match(rest)
            if found is None:
                continue
            path_matched = True
            if route_method == method:
                return RouteMatch(op=op, api=api, params=found.groupdict())
        if path_matched:
            return FakeApiError(405, "Method not allowed.")
        return FakeApiError(404, ROUTE_NOT_FOUND_MESSAGE)
    return FakeApiError(404, ROUTE_NOT_FOUND_MESSAGE)
