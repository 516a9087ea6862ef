"""The raw client's operations as machines (wire 1.4, 2, 8, 9; D4, D10, D11, D16, D17).

An adapter's ``CoderChatClient`` method builds one of these and hands it to its driver, which
sends the requests and feeds the answers back:

* ``RestJob`` runs one REST call through the client's ``PrefixSelector`` (wire 1.4) and
  classifies the answer with the operation's ``parse_*`` function (wire 2, 10); ``rest_job``
  builds it for a raw operation by name;
* ``interrupt_job`` is the raw ``interrupt_chat``, with D4's follow-up and D11's wait;
* ``ModelConfigsJob`` / ``ResolveModelJob`` list model configs and resolve a hint with the
  org route and its legacy fallback (wire 8, D16);
* ``PreviewJob`` is the workspace helpers' ``preview_url`` / ``share_port`` (wire 9: no
  prefix, no transport events), answering a ``WorkspacePreview``.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from typing import Any, Final, Generic, TypeVar

import attrs

from .._constants import INTERRUPT_WAIT_TIMEOUT
from .._engine import CoreMachine, Wait
from .._errors import CoderAgentError
from .._rest.chat_extras import (
    build_clear_chat,
    build_compact_chat,
    build_edit_chat_message,
    build_get_chat_diff,
    build_get_chat_file_download_url,
    build_get_chat_prompts,
    build_get_chats_by_workspace,
    build_propose_chat_title,
    build_reconcile_chat,
    build_refresh_chat_context,
    parse_chat_answer,
    parse_edit_chat_message,
    parse_get_chat_diff,
    parse_get_chat_file_download_url,
    parse_get_chat_prompts,
    parse_get_chats_by_workspace,
    parse_propose_chat_title,
)
from .._rest.http import HttpRequest, HttpResponse
from .._rest.model_hints import (
    ModelConfigs,
    ModelConfigsExchange,
    is_model_config_uuid,
    resolve_model_hint,
)
from .._rest.prefix import PrefixSelector
from .._rest.routes import (
    build_archive_chat,
    build_create_chat,
    build_create_chat_message,
    build_delete_queued_message,
    build_edit_queued_message,
    build_get_chat,
    build_get_chat_cost,
    build_get_chat_file,
    build_get_messages,
    build_list_chats,
    build_promote_queued_message,
    build_submit_tool_results,
    build_update_chat,
    check_chat_id,
    parse_archive_chat,
    parse_create_chat,
    parse_create_chat_message,
    parse_delete_queued_message,
    parse_edit_queued_message,
    parse_get_chat,
    parse_get_chat_cost,
    parse_get_chat_file,
    parse_get_messages,
    parse_list_chats,
    parse_promote_queued_message,
    parse_submit_tool_results,
    parse_update_chat,
)
from .._rest.workspaces import (
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
from .._wire.chats import ChatModelConfig
from .organization import UNKNOWN_ORGANIZATION, default_organization
from .stopping import ChatInterrupt

__all__ = [
    "ModelConfigsJob",
    "OrganizationRestJob",
    "PreviewJob",
    "ResolveModelJob",
    "RestJob",
    "WorkspacePreview",
    "interrupt_job",
    "rest_job",
]

R = TypeVar("R")


# -- settings (wire 1.1) -----------------------------------------------------------------------


# -- REST machines -----------------------------------------------------------------------------


class RestJob(CoreMachine[R], Generic[R]):
    """One REST operation (wire 2): send ``request`` through the client's prefix selector
    (wire 1.4; requests outside the chat routes pass through unchanged) and classify the
    conclusive answer with ``parse`` (a ``parse_*`` function of ``coder_proto._rest.routes``).
    ``result()`` is the parsed value or raises its ``CoderApiError`` / ``CoderNetworkError`` /
    ``CoderProtocolError``."""

    def __init__(
        self,
        selector: PrefixSelector,
        request: HttpRequest,
        parse: Callable[[HttpRequest, HttpResponse], R],
        *,
        now: float,
    ) -> None:
        if not isinstance(request, HttpRequest):
            raise CoderAgentError("RestJob needs an HttpRequest")
        super().__init__(selector)
        self.request = request
        self._parse = parse
        self._start(now)

    def __repr__(self) -> str:
        return f"RestJob(op={self.request.op!r}, done={self.done})"

    def _run(self) -> Generator[None, None, R]:
        return (yield from self._rest(self.request, self._parse))


class OrganizationRestJob(RestJob[R], Generic[R]):
    """A ``RestJob`` whose request names an organization (a new chat, an upload): ``build``
    makes the request for an organization id. With ``organization_id=None`` the client's
    default organization is asked of the deployment first, once per client (D33); the
    request is built and checked before anything is sent either way."""

    def __init__(
        self,
        selector: PrefixSelector,
        organization_id: str | None,
        build: Callable[[str], HttpRequest],
        parse: Callable[[HttpRequest, HttpResponse], R],
        *,
        now: float,
    ) -> None:
        self._build = build
        self._given = organization_id
        super().__init__(selector, build(organization_id or UNKNOWN_ORGANIZATION), parse, now=now)

    def _run(self) -> Generator[None, None, R]:
        if self._given is None:
            organization_id = yield from default_organization(self)
            self.request = self._build(organization_id)
        return (yield from self._rest(self.request, self._parse))


#: The raw client's operations that are one request and one classified answer (wire 2).
_SIMPLE_OPS: Final[Mapping[str, tuple[Callable[..., HttpRequest], Callable[..., Any]]]] = {
    "create_chat": (build_create_chat, parse_create_chat),
    "get_chat": (build_get_chat, parse_get_chat),
    "list_chats": (build_list_chats, parse_list_chats),
    "create_chat_message": (build_create_chat_message, parse_create_chat_message),
    "get_messages": (build_get_messages, parse_get_messages),
    "submit_tool_results": (build_submit_tool_results, parse_submit_tool_results),
    "delete_queued_message": (build_delete_queued_message, parse_delete_queued_message),
    "edit_queued_message": (build_edit_queued_message, parse_edit_queued_message),
    "promote_queued_message": (build_promote_queued_message, parse_promote_queued_message),
    "update_chat": (build_update_chat, parse_update_chat),
    "archive_chat": (build_archive_chat, parse_archive_chat),
    "get_chat_file": (build_get_chat_file, parse_get_chat_file),
    "get_chat_cost": (build_get_chat_cost, parse_get_chat_cost),
    "share_port": (build_share_port, parse_share_port),
    "edit_chat_message": (build_edit_chat_message, parse_edit_chat_message),
    "get_chat_prompts": (build_get_chat_prompts, parse_get_chat_prompts),
    "compact_chat": (build_compact_chat, parse_chat_answer),
    "clear_chat": (build_clear_chat, parse_chat_answer),
    "reconcile_chat": (build_reconcile_chat, parse_chat_answer),
    "refresh_chat_context": (build_refresh_chat_context, parse_chat_answer),
    "propose_chat_title": (build_propose_chat_title, parse_propose_chat_title),
    "get_chat_diff": (build_get_chat_diff, parse_get_chat_diff),
    "get_chats_by_workspace": (build_get_chats_by_workspace, parse_get_chats_by_workspace),
    "get_chat_file_download_url": (
        build_get_chat_file_download_url,
        parse_get_chat_file_download_url,
    ),
}


def rest_job(
    selector: PrefixSelector, op: str, *args: Any, now: float, **kwargs: Any
) -> RestJob[Any]:
    """The ``RestJob`` of raw client operation ``op`` (``create_chat``, ``get_messages``,
    ``archive_chat`` ...), its request built from ``args``/``kwargs`` by the operation's
    ``build_*`` function (which validates them first). ``archive_chat`` answers
    ``"archived"`` or ``"already_archived"`` (the server's 400 "Chat is already archived."
    counts as success, D10); it is one request, never retried (the 409 loop belongs to the
    agent's ``archive()``, H.4)."""
    entry = _SIMPLE_OPS.get(op)
    if entry is None:
        raise CoderAgentError(f"unknown client operation {op!r}")
    build, parse = entry
    return RestJob(selector, build(*args, **kwargs), parse, now=now)


def interrupt_job(
    selector: PrefixSelector,
    chat_id: str,
    *,
    now: float,
    wait: bool = False,
    timeout: float | None = None,
    last_status: str | None = None,
) -> ChatInterrupt:
    """The raw ``interrupt_chat`` (wire 2, D4, D11): with ``wait`` it sends ``?wait=true`` and
    polls the chat every second until it is settled, raising the builtin ``TimeoutError``
    after ``timeout`` seconds (15 s by default). ``last_status="requires_action"`` enables
    D4's follow-up interrupt."""
    check_chat_id(chat_id)
    if type(wait) is not bool:
        raise CoderAgentError(f"wait must be a bool, got {wait!r}")
    budget = INTERRUPT_WAIT_TIMEOUT if timeout is None else timeout
    if isinstance(budget, bool) or not isinstance(budget, int | float) or not budget > 0:
        raise CoderAgentError(f"timeout must be a positive number of seconds, got {timeout!r}")
    return ChatInterrupt(
        selector, chat_id, now=now, wait=wait, timeout=float(budget), last_status=last_status
    )


# -- request bodies from Python arguments ------------------------------------------------------


# -- model configs (wire 8, D16) ---------------------------------------------------------------


class ModelConfigsJob(CoreMachine[tuple[ChatModelConfig, ...]]):
    """``list_model_configs(organization_id)`` (wire 8, D16): the org route, and only on its
    404 the legacy route once (entries of other organizations dropped); never touches the
    prefix lock. ``source`` tells which route answered. ``organization_id=None`` lists the
    client's default organization (D33: asked of the deployment once per client)."""

    def __init__(
        self,
        selector: PrefixSelector,
        organization_id: str | None,
        *,
        now: float,
        op: str = "list_model_configs",
    ) -> None:
        self._op = op
        self.exchange: ModelConfigsExchange | None = None
        if organization_id is not None:
            self.exchange = ModelConfigsExchange(
                check_chat_id(organization_id, "organization_id"), op=op
            )
        super().__init__(selector)
        #: The route that answered (``"org"`` or ``"legacy"``), once known.
        self.source: str | None = None
        self._start(now)

    def _run(self) -> Generator[None, None, tuple[ChatModelConfig, ...]]:
        listing = yield from self._list()
        return listing.configs

    def _list(self) -> Wait[ModelConfigs]:
        if self.exchange is None:
            organization_id = yield from default_organization(self)
            self.exchange = ModelConfigsExchange(organization_id, op=self._op)
        call = self._begin_exchange(self.exchange)
        listing: ModelConfigs = yield from self._await_call(call, _as_model_configs)
        self.source = listing.source
        return listing


class ResolveModelJob(CoreMachine["str | None"]):
    """``resolve_model_config_id(hint, organization_id)`` (wire 8): a UUID hint is the answer
    with no request; otherwise the configs are listed (op ``resolve_model_config_id``, D16)
    and matched in wire 8's order. ``result()`` is the config id, or ``None`` when nothing
    matches (the caller then omits ``model_config_id``)."""

    def __init__(
        self, selector: PrefixSelector, hint: str, organization_id: str, *, now: float
    ) -> None:
        if type(hint) is not str:
            raise CoderAgentError(f"a model hint must be a string, got {hint!r}")
        self.hint = hint
        self.exchange = ModelConfigsExchange(
            check_chat_id(organization_id, "organization_id"), op="resolve_model_config_id"
        )
        super().__init__(selector)
        self._start(now)

    def _run(self) -> Generator[None, None, str | None]:
        if is_model_config_uuid(self.hint):
            return self.hint
        call = self._begin_exchange(self.exchange)
        listing: ModelConfigs = yield from self._await_call(call, _as_model_configs)
        return resolve_model_hint(self.hint, listing.configs)


def _as_model_configs(outcome: Any) -> ModelConfigs:
    assert isinstance(outcome, ModelConfigs)  # the exchange yields nothing else on success
    return outcome


# -- workspaces (wire 9) -----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class WorkspacePreview:
    """A workspace port's browser URL (wire 9). ``share_level`` is the level in effect after
    ``share_port`` (``None`` for a plain ``preview_url``: the port keeps its current level,
    private to the owner unless shared)."""

    url: str
    port: int
    agent_name: str
    protocol: str
    workspace_id: str
    share_level: str | None = None
    share: PortShare | None = attrs.field(default=None, eq=False, repr=False)


class PreviewJob(CoreMachine[WorkspacePreview]):
    """``preview_url`` / ``share_port`` (wire 9): the workspace lookup and the wildcard app
    host run concurrently; the agent is the given one or the workspace's only agent; with
    ``share_level`` the port share is upserted before the URL is returned. No prefix
    negotiation and no transport events (wire 9). Every argument is checked before a
    request is sent."""

    def __init__(
        self,
        selector: PrefixSelector,
        *,
        base_url: str,
        workspace_id: str,
        port: int,
        now: float,
        agent_name: str | None = None,
        protocol: str = "http",
        share_level: str | None = None,
    ) -> None:
        self.workspace_id = check_chat_id(workspace_id, "workspace_id")
        self.port = check_preview_port(port)
        if protocol not in ("http", "https"):
            raise CoderAgentError(f'protocol must be "http" or "https", got {protocol!r}')
        if agent_name is not None and (type(agent_name) is not str or not agent_name):
            raise CoderAgentError(f"agent_name must be a non-empty string, got {agent_name!r}")
        if share_level is not None:
            # Validates the level ("owner" is refused) before any request.
            build_share_port(
                workspace_id, agent_name="-", port=port, share_level=share_level, protocol=protocol
            )
        super().__init__(selector)
        self.base_url = base_url
        self.agent_name = agent_name
        self.protocol = protocol
        self.share_level = share_level
        self._start(now)

    def _run(self) -> Generator[None, None, WorkspacePreview]:
        workspace_call = self._begin_call(build_get_workspace(self.workspace_id))
        host_call = self._begin_call(build_get_app_host())
        workspace: WorkspaceInfo = yield from self._await_call(
            workspace_call, self._completed(parse_get_workspace)
        )
        host: str = yield from self._await_call(host_call, self._completed(parse_get_app_host))
        agent = select_agent(workspace, self.agent_name)
        label = preview_label(self.port, agent, workspace, protocol=self.protocol)
        url = preview_url(self.base_url, host, label)
        share: PortShare | None = None
        level: str | None = None
        if self.share_level is not None:
            share = yield from self._rest(
                build_share_port(
                    self.workspace_id,
                    agent_name=agent,
                    port=self.port,
                    share_level=self.share_level,
                    protocol=self.protocol,
                ),
                parse_share_port,
            )
            level = share.share_level
        return WorkspacePreview(
            url=url,
            port=self.port,
            agent_name=agent,
            protocol=self.protocol,
            workspace_id=self.workspace_id,
            share_level=level,
            share=share,
        )


# -- uploads (wire 7, D20) ---------------------------------------------------------------------
