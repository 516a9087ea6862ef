"""The pure side of the raw chat client: settings, one small machine per REST operation, and
the facts every adapter's driver needs (wire 1, 2, 7, 8, 9; D16, D17, D20, D23, D24).

An adapter's ``CoderChatClient`` stays a thin shell: each ``async``/blocking method builds one
of the machines below and hands it to its driver, which sends the requests and feeds the
answers back. Everything a method would otherwise decide lives here:

* ``ClientSettings.resolve`` applies the ``CODER_URL`` / ``CODER_SESSION_TOKEN`` defaults
  (explicit values win) and removes one trailing ``/`` (wire 1.1);
* ``RestJob`` runs one REST call through the client's ``PrefixSelector`` (wire 1.4) and
  classifies the answer with the operation's ``parse_*`` function (wire 2, 10);
* ``ModelConfigsJob`` / ``ResolveModelJob`` list model configs and resolve a hint with the
  org route and its legacy fallback (wire 8, D16);
* ``PreviewUrlJob`` / ``SharePortJob`` are the workspace helpers (wire 9: no prefix, no
  transport events);
* ``plan_upload`` turns bytes, a path or a file object into what the adapter must read and
  the media type and name the upload carries (wire 7, D20).

``emits_transport_events`` says which requests a driver reports as ``http:*`` events (wire 9,
11), and ``CONNECT_TIMEOUT`` is the connect bound of D23, so no driver carries policy of its own.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Any, Final, Generic, TypeVar
from urllib.parse import urlsplit

import attrs

from .actions import ToolOutcome
from .cleanup import ChatInterrupt
from .constants import INTERRUPT_WAIT_TIMEOUT, MEDIA_TYPE_EXTENSIONS
from .errors import CoderAgentError
from .machine import CoreMachine, Wait
from .model_hints import (
    ModelConfigs,
    ModelConfigsExchange,
    is_model_config_uuid,
    resolve_model_hint,
)
from .operations import (
    build_archive_chat,
    build_create_chat,
    build_create_chat_message,
    build_delete_queued_message,
    build_get_chat,
    build_get_chat_cost,
    build_get_chat_file,
    build_get_messages,
    build_list_chats,
    build_submit_tool_results,
    build_update_chat,
    check_chat_id,
    parse_archive_chat,
    parse_create_chat,
    parse_create_chat_message,
    parse_delete_queued_message,
    parse_get_chat,
    parse_get_chat_cost,
    parse_get_chat_file,
    parse_get_messages,
    parse_list_chats,
    parse_submit_tool_results,
    parse_update_chat,
)
from .prefix import PrefixSelector
from .rest import HttpRequest, HttpResponse
from .uploads import build_upload_chat_file, parse_upload_chat_file
from .wire.chats import (
    ChatInputPart,
    ChatModelConfig,
    CreateChatMessageRequest,
    CreateChatRequest,
    DynamicTool,
    FileInput,
    FileReferenceInput,
    TextInput,
    ToolResultInput,
)
from .workspaces import (
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

__all__ = [
    "CONNECT_TIMEOUT",
    "ENV_TOKEN",
    "ENV_URL",
    "UNOBSERVED_OPS",
    "ClientSettings",
    "ModelConfigsJob",
    "PreviewJob",
    "ResolveModelJob",
    "RestJob",
    "UploadPlan",
    "WorkspacePreview",
    "chat_input_parts",
    "create_chat_message_request",
    "create_chat_request",
    "emits_transport_events",
    "guess_media_type",
    "interrupt_job",
    "plan_upload",
    "rest_job",
    "tool_result_inputs",
]

R = TypeVar("R")

#: D23: the connect timeout of the HTTP clients an adapter creates (no read timeout: the
#: core's deadlines bound every wait) and of the stream sockets it opens.
CONNECT_TIMEOUT: Final = 30.0

#: Operations that emit no ``http:*`` events: the workspace helpers (wire 9, 11).
UNOBSERVED_OPS: Final = frozenset({"get_workspace", "get_app_host", "share_port"})

#: The environment variables the client defaults from (wire 1.1; docs/decisions.md "Environment and defaults").
ENV_URL: Final = "CODER_URL"
ENV_TOKEN: Final = "CODER_SESSION_TOKEN"


def emits_transport_events(request: HttpRequest) -> bool:
    """True when a driver reports ``request`` as ``http:request`` / ``http:response`` /
    ``http:error`` events (wire 11, D24): every REST call except the workspace helpers
    (wire 9)."""
    return request.op not in UNOBSERVED_OPS


# -- settings (wire 1.1) -----------------------------------------------------------------------


@attrs.frozen(kw_only=True)
class ClientSettings:
    """Where a client talks to and with which credential. The token is never shown."""

    base_url: str
    token: str = attrs.field(repr=False)

    @classmethod
    def resolve(
        cls,
        base_url: str | None = None,
        token: str | None = None,
        *,
        environ: Mapping[str, str] | None = None,
    ) -> ClientSettings:
        """Explicit values win over ``CODER_URL`` / ``CODER_SESSION_TOKEN`` (from ``environ``,
        which the adapter passes as ``os.environ``); one trailing ``/`` of the URL is removed
        (wire 1.1). A missing URL or token, a URL that is not ``http(s)://host...``, or a
        value of the wrong type raises ``CoderAgentError`` saying how to fix it."""
        env = environ if environ is not None else {}
        url = base_url if base_url is not None else env.get(ENV_URL) or None
        secret = token if token is not None else env.get(ENV_TOKEN) or None
        if url is None:
            raise CoderAgentError(
                f"no Coder deployment URL: pass base_url=... or set {ENV_URL} "
                "(for example https://coder.example.com)"
            )
        if type(url) is not str:
            raise CoderAgentError(f"base_url must be a string, got {type(url).__name__}")
        if secret is None or secret == "":
            raise CoderAgentError(f"no Coder session token: pass token=... or set {ENV_TOKEN}")
        if type(secret) is not str:
            raise CoderAgentError(f"token must be a string, got {type(secret).__name__}")
        if any(c in secret for c in "\r\n\x00"):
            raise CoderAgentError("token must not contain line breaks or NUL characters")
        url = url.strip()
        if url.endswith("/"):
            url = url[:-1]
        try:
            parts = urlsplit(url)
        except ValueError:
            parts = None
        if parts is None or parts.scheme not in ("http", "https") or not parts.hostname:
            raise CoderAgentError(
                f"base_url must be an http:// or https:// URL with a host, got {url!r}"
            )
        if parts.query or parts.fragment:
            raise CoderAgentError(f"base_url must not carry a query or fragment, got {url!r}")
        return cls(base_url=url, token=secret)


# -- REST machines -----------------------------------------------------------------------------


class RestJob(CoreMachine[R], Generic[R]):
    """One REST operation (wire 2): send ``request`` through the client's prefix selector
    (wire 1.4; requests outside the chat routes pass through unchanged) and classify the
    conclusive answer with ``parse`` (a ``parse_*`` function of ``coder_proto.operations``).
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


#: The raw client's operations that are one request and one classified answer (wire 2).
_SIMPLE_OPS: Final[Mapping[str, tuple[Callable[..., HttpRequest], Callable[..., Any]]]] = {
    "create_chat": (build_create_chat, parse_create_chat),
    "get_chat": (build_get_chat, parse_get_chat),
    "list_chats": (build_list_chats, parse_list_chats),
    "create_chat_message": (build_create_chat_message, parse_create_chat_message),
    "get_messages": (build_get_messages, parse_get_messages),
    "submit_tool_results": (build_submit_tool_results, parse_submit_tool_results),
    "delete_queued_message": (build_delete_queued_message, parse_delete_queued_message),
    "update_chat": (build_update_chat, parse_update_chat),
    "archive_chat": (build_archive_chat, parse_archive_chat),
    "get_chat_file": (build_get_chat_file, parse_get_chat_file),
    "get_chat_cost": (build_get_chat_cost, parse_get_chat_cost),
    "share_port": (build_share_port, parse_share_port),
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


def chat_input_parts(content: object) -> tuple[ChatInputPart, ...]:
    """Message content as input parts (wire 3.1): a string is one text part; otherwise a
    non-empty sequence of ``TextInput`` / ``FileInput`` / ``FileReferenceInput`` (strings in
    it become text parts)."""
    if isinstance(content, str):
        return (TextInput(content),)
    if isinstance(content, TextInput | FileInput | FileReferenceInput):
        return (content,)
    if not isinstance(content, Sequence) or isinstance(content, bytes | bytearray):
        raise CoderAgentError(
            "content must be a string or a sequence of TextInput / FileInput / "
            f"FileReferenceInput parts, got {type(content).__name__}"
        )
    parts: list[ChatInputPart] = []
    for item in content:
        if isinstance(item, str):
            parts.append(TextInput(item))
        elif isinstance(item, TextInput | FileInput | FileReferenceInput):
            parts.append(item)
        else:
            raise CoderAgentError(
                f"content parts must be TextInput, FileInput or FileReferenceInput, got {item!r}"
            )
    if not parts:
        raise CoderAgentError("content must not be empty")
    return tuple(parts)


def _opt_text(value: object, name: str) -> str | None:
    if value is None:
        return None
    if type(value) is not str:
        raise CoderAgentError(f"{name} must be a string, got {value!r}")
    return value


def _ids(value: object, name: str) -> tuple[str, ...]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise CoderAgentError(f"{name} must be a sequence of strings, got {value!r}")
    out = tuple(value)
    if not all(type(v) is str and v for v in out):
        raise CoderAgentError(f"{name} must be non-empty strings")
    return out


def create_chat_request(
    request: CreateChatRequest | None = None,
    *,
    organization_id: str | None = None,
    content: object = None,
    system_prompt: str | None = None,
    tools: Sequence[DynamicTool] = (),
    model_config_id: str | None = None,
    reasoning_effort: str | None = None,
    workspace_id: str | None = None,
    mcp_server_ids: Sequence[str] = (),
    plan_mode: str | None = None,
    labels: Mapping[str, str] | None = None,
) -> CreateChatRequest:
    """The ``CreateChatRequest`` of ``create_chat`` (wire 2.1): ``request`` as given, or one
    built from the keyword fields (``organization_id`` and ``content`` required). Giving both
    is an error."""
    fields = (
        organization_id,
        content,
        system_prompt,
        model_config_id,
        reasoning_effort,
        workspace_id,
        plan_mode,
        labels,
    )
    if request is not None:
        if not isinstance(request, CreateChatRequest):
            raise CoderAgentError("create_chat needs a CreateChatRequest or keyword fields")
        if any(f is not None for f in fields) or tools or mcp_server_ids:
            raise CoderAgentError("pass either a CreateChatRequest or keyword fields, not both")
        return request
    if organization_id is None:
        raise CoderAgentError("create_chat needs organization_id")
    if content is None:
        raise CoderAgentError("create_chat needs content")
    if not all(isinstance(t, DynamicTool) for t in tools):
        raise CoderAgentError("tools must be DynamicTool values")
    if labels is not None and (
        not isinstance(labels, Mapping)
        or not all(type(k) is str and type(v) is str for k, v in labels.items())
    ):
        raise CoderAgentError("labels must map strings to strings")
    return CreateChatRequest(
        organization_id=check_chat_id(organization_id, "organization_id"),
        content=chat_input_parts(content),
        system_prompt=_opt_text(system_prompt, "system_prompt"),
        unsafe_dynamic_tools=tuple(tools),
        model_config_id=_opt_text(model_config_id, "model_config_id"),
        reasoning_effort=_opt_text(reasoning_effort, "reasoning_effort"),
        workspace_id=_opt_text(workspace_id, "workspace_id"),
        mcp_server_ids=_ids(mcp_server_ids, "mcp_server_ids"),
        plan_mode=_opt_text(plan_mode, "plan_mode"),
        labels=dict(labels) if labels is not None else None,
    )


def create_chat_message_request(
    request: CreateChatMessageRequest | None = None,
    *,
    content: object = None,
    model_config_id: str | None = None,
    reasoning_effort: str | None = None,
    busy_behavior: str | None = None,
    mcp_server_ids: Sequence[str] | None = None,
    plan_mode: str | None = None,
) -> CreateChatMessageRequest:
    """The ``CreateChatMessageRequest`` of ``create_chat_message`` (wire 2.2): ``request`` as
    given, or one built from the keyword fields (``content`` required; ``busy_behavior`` is
    ``"queue"`` or ``"interrupt"``)."""
    fields = (content, model_config_id, reasoning_effort, busy_behavior, mcp_server_ids, plan_mode)
    if request is not None:
        if not isinstance(request, CreateChatMessageRequest):
            raise CoderAgentError(
                "create_chat_message needs a CreateChatMessageRequest or keyword fields"
            )
        if any(f is not None for f in fields):
            raise CoderAgentError(
                "pass either a CreateChatMessageRequest or keyword fields, not both"
            )
        return request
    if content is None:
        raise CoderAgentError("create_chat_message needs content")
    if busy_behavior not in (None, "queue", "interrupt"):
        raise CoderAgentError(
            f'busy_behavior must be "queue" or "interrupt", got {busy_behavior!r}'
        )
    return CreateChatMessageRequest(
        content=chat_input_parts(content),
        model_config_id=_opt_text(model_config_id, "model_config_id"),
        reasoning_effort=_opt_text(reasoning_effort, "reasoning_effort"),
        busy_behavior=busy_behavior,
        mcp_server_ids=None if mcp_server_ids is None else _ids(mcp_server_ids, "mcp_server_ids"),
        plan_mode=_opt_text(plan_mode, "plan_mode"),
    )


def tool_result_inputs(results: object) -> tuple[ToolResultInput, ...]:
    """The results of ``submit_tool_results`` exactly as given (D5: the raw method passes
    whatever it is given), accepting ``ToolResultInput`` and ``ToolOutcome`` values."""
    if isinstance(results, ToolResultInput | ToolOutcome):
        results = (results,)
    if isinstance(results, str) or not isinstance(results, Sequence):
        raise CoderAgentError("results must be a sequence of ToolResultInput values")
    out: list[ToolResultInput] = []
    for item in results:
        if isinstance(item, ToolResultInput):
            out.append(item)
        elif isinstance(item, ToolOutcome):
            out.append(
                ToolResultInput(
                    tool_call_id=item.tool_call_id, output=item.output, is_error=item.is_error
                )
            )
        else:
            raise CoderAgentError(f"results must be ToolResultInput values, got {item!r}")
    return tuple(out)


# -- model configs (wire 8, D16) ---------------------------------------------------------------


class ModelConfigsJob(CoreMachine[tuple[ChatModelConfig, ...]]):
    """``list_model_configs(organization_id)`` (wire 8, D16): the org route, and only on its
    404 the legacy route once (entries of other organizations dropped); never touches the
    prefix lock. ``source`` tells which route answered."""

    def __init__(
        self,
        selector: PrefixSelector,
        organization_id: str,
        *,
        now: float,
        op: str = "list_model_configs",
    ) -> None:
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

#: Extensions the allowlist's media types are known by (wire 7); anything else needs an
#: explicit ``media_type``.
_EXTENSION_TYPES: Final = {
    **{ext: media for media, ext in MEDIA_TYPE_EXTENSIONS.items()},
    "jpeg": "image/jpeg",
    "markdown": "text/markdown",
    "text": "text/plain",
}


def guess_media_type(filename: str | None) -> str | None:
    """The allowlisted media type a file name's extension stands for (``report.pdf`` ->
    ``application/pdf``), or ``None``. Deterministic: no system MIME database is read."""
    if not filename or type(filename) is not str:
        return None
    base = filename.replace("\\", "/").rsplit("/", 1)[-1]
    if "." not in base:
        return None
    return _EXTENSION_TYPES.get(base.rsplit(".", 1)[1].lower())


@attrs.frozen(kw_only=True)
class UploadPlan:
    """What an adapter must do to upload one file (wire 7): read ``path`` or ``stream`` (a
    binary file object) unless ``data`` is already there, then ``request(organization_id,
    data)``. ``media_type`` and ``filename`` are the caller's, or derived from the name."""

    data: bytes | None = attrs.field(default=None, repr=False)
    path: str | None = None
    stream: Any = attrs.field(default=None, repr=False)
    media_type: str | None = None
    filename: str | None = None

    def request(self, organization_id: str, data: object) -> HttpRequest:
        """The upload request for ``data`` (the bytes read): checks the content type, the
        media type against the allowlist and the 10 MiB cap first (wire 7)."""
        if not isinstance(data, bytes | bytearray | memoryview):
            raise CoderAgentError(
                "Unsupported file content: the file object returned "
                f"{type(data).__name__}, expected bytes (open the file in binary mode)."
            )
        return build_upload_chat_file(
            organization_id, data, media_type=self.media_type or "", filename=self.filename
        )


def plan_upload(
    content: object, *, media_type: str | None = None, filename: str | None = None
) -> UploadPlan:
    """Classify upload ``content`` (wire 7): ``bytes`` / ``bytearray`` / ``memoryview``; a
    path (``str`` or ``os.PathLike``; its base name is the default file name); or a binary file
    object with ``read()`` (its ``name`` attribute, when a string, is the default file name).
    Without ``media_type`` it is guessed from the file name's extension; a missing media type
    fails with wire 7's message when the request is built."""
    if media_type is not None and type(media_type) is not str:
        raise CoderAgentError(f"media_type must be a string, got {media_type!r}")
    if filename is not None and type(filename) is not str:
        raise CoderAgentError(f"filename must be a string, got {filename!r}")
    data: bytes | None = None
    path: str | None = None
    stream: Any = None
    name = filename
    if isinstance(content, bytes | bytearray | memoryview):
        data = bytes(content)
    elif isinstance(content, str | os.PathLike):
        path = os.fspath(content)
        if not isinstance(path, str) or not path:
            raise CoderAgentError(f"a file path must be a non-empty string, got {content!r}")
        if name is None:
            name = path.replace("\\", "/").rsplit("/", 1)[-1] or None
    elif callable(getattr(content, "read", None)):
        stream = content
        if name is None:
            own = getattr(content, "name", None)
            if type(own) is str and own:
                name = own.replace("\\", "/").rsplit("/", 1)[-1] or None
    else:
        raise CoderAgentError(
            "Unsupported file content: expected bytes, a path or a binary file object, "
            f"got {type(content).__name__}."
        )
    return UploadPlan(
        data=data,
        path=path,
        stream=stream,
        media_type=media_type if media_type is not None else guess_media_type(name),
        filename=name,
    )


def upload_result(request: HttpRequest, response: HttpResponse) -> str:
    """The uploaded file's id (wire 2): ``parse_upload_chat_file``."""
    return parse_upload_chat_file(request, response)
