"""The runtime-independent half of every adapter's ``CoderAgent`` (docs/architecture.md "Public API"; H.1,
H.2): the constructor and its checks, the client it talks through and the routing of its
transport events, and the session-state properties. An adapter subclasses ``AgentShell``
with its client class and adds the methods that perform I/O.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Protocol, TypeVar

from .._agent.agent_core import AgentCore
from .._agent.options import AgentOptions, option_keywords
from .._agent.workspace_files import WorkspaceFiles
from .._constants import DEFAULT_MAX_STEPS, SETTLE_DEADLINE, SETTLE_RETRY_DELAY
from .._errors import CoderAgentError
from .._rest.prefix import PrefixSelector
from .._rest.settings import ClientSettings
from .._transport_events import TransportEventSink
from .agent_calls import AgentOperations

if TYPE_CHECKING:
    from .._agent.tools import Tool
    from .._recording import Recorder

__all__ = ["AgentClient", "AgentShell", "check_connection", "segment_sink"]


def segment_sink(
    client_sink: TransportEventSink, own_sink: TransportEventSink | None
) -> TransportEventSink:
    """The session's sink when the agent runs on a supplied client (wire 11, D24): the
    ``segment:*`` events go to the agent's own sink, everything else (``http:*``, ``ws:*``) to
    the client's. Without an agent hook every event goes to the client's sink."""
    if own_sink is None:
        return client_sink
    own = own_sink

    def route(event: Any) -> None:
        if event.type.startswith("segment:"):
            own.emit(event)
        else:
            client_sink.emit(event)

    return TransportEventSink(route, wall_clock=client_sink.wall_clock)


class AgentClient(Protocol):
    """What ``AgentShell`` needs of an adapter's ``CoderChatClient``."""

    settings: ClientSettings
    selector: PrefixSelector
    sink: TransportEventSink
    driver: Any

    def _make_sink(self, callback: Callable[[Any], object] | None) -> TransportEventSink: ...


ClientT = TypeVar("ClientT", bound=AgentClient)
HttpClientT = TypeVar("HttpClientT")


class AgentShell(Generic[ClientT, HttpClientT]):
    """The runtime-independent half of every adapter's ``CoderAgent`` (docs/architecture.md "Public API";
    H.1, H.2): the constructor and its checks, the client it talks through and the event
    routing, the session-state properties. An adapter subclasses it with its client class
    (``_client_class``) and adds the methods that perform I/O.

    One agent is one server chat, created by the first turn and reused by the next ones
    (H.1). Connection: ``client`` (a ``CoderChatClient`` of the same runtime, never closed
    here) or ``base_url`` / ``token`` (defaulting to ``CODER_URL`` / ``CODER_SESSION_TOKEN``)
    with ``http_client`` (the runtime's httpx client) and ``verify``.

    Settings: ``options`` (an ``AgentOptions``) and the same settings as keywords; a keyword
    passed explicitly overrides the field of ``options`` (see ``AgentOptions``).
    ``organization_id`` defaults to ``CODER_ORGANIZATION_ID`` or ``CODER_ORG_ID``, else the
    signed-in user's first organization (D33). Durations are seconds:
    ``request_timeout`` bounds each segment (C.3), ``settle_deadline`` and
    ``settle_retry_delay`` bound cleanup (H.4, H.5). ``tools`` are ``@tool`` functions,
    ``Tool`` objects (explicit JSON Schema, attrs classes, dataclasses, pydantic models) or
    plain functions, as a sequence or a name -> tool mapping. ``output_type`` enables the
    structured-output tool (``result.output``). ``chat_id`` and ``last_seen_message_id``
    resume a chat. ``on_transport_event`` receives transport events; with a supplied ``client`` the
    ``http:*`` and ``ws:*`` events go to that client's hook and this one receives the
    ``segment:*`` events (all of them go to the client's hook when the agent has none).
    ``recorder`` (a ``coder_proto.transcript.Recorder``) is told what crosses the wire
    (``docs/transcripts.md``). ``on_chat_created`` (a plain function) is called with the chat
    id as soon as a turn's create request answers, before the stream opens, so the id can be
    stored before anything else happens; an exception it raises is logged (logger
    ``coder_proto``) and the turn goes on. Construction does no I/O.
    """

    #: The adapter's ``CoderChatClient`` class: a supplied client must be one.
    _client_class: ClassVar[type[Any]]

    @option_keywords
    def __init__(
        self,
        *,
        options: AgentOptions | None = None,
        organization_id: str | None = None,
        model: str | None = None,
        instructions: str | None = None,
        tools: Iterable[Tool | Callable[..., Any]] | Mapping[str, Any] | None = None,
        output_type: Any = None,
        request_timeout: float | None = None,
        chat_id: str | None = None,
        last_seen_message_id: int | None = None,
        workspace_id: str | None = None,
        workspace_files: WorkspaceFiles | None = None,
        mcp_server_ids: Sequence[str] = (),
        reasoning_effort: str | None = None,
        plan_mode: str | None = None,
        busy_behavior: str | None = None,
        max_steps: int = DEFAULT_MAX_STEPS,
        max_retries: int = 0,
        settle_deadline: float = SETTLE_DEADLINE,
        settle_retry_delay: float = SETTLE_RETRY_DELAY,
        on_transport_event: Callable[[Any], object] | None = None,
        on_chat_created: Callable[[str], object] | None = None,
        client: ClientT | None = None,
        base_url: str | None = None,
        token: str | None = None,
        http_client: HttpClientT | None = None,
        verify: Any = True,
        recorder: Recorder | None = None,
    ) -> None:
        # The option keywords are folded into ``options`` (``option_keywords``).
        assert options is not None
        client_class = self._client_class
        if client is not None:
            check_connection(client, base_url=base_url, token=token, http_client=http_client)
            if not isinstance(client, client_class):
                runtime = client_class.__module__.partition(".")[0]
                raise CoderAgentError(f"client must be a {runtime} CoderChatClient")
            self._owns_client = False
            own = client._make_sink(on_transport_event) if on_transport_event else None
            sink = segment_sink(client.sink, own)
        else:
            client = client_class(
                base_url,
                token,
                http_client=http_client,
                verify=verify,
                on_transport_event=on_transport_event,
                recorder=recorder,
            )
            assert client is not None
            self._owns_client = True
            sink = client.sink
        self._client: ClientT = client
        self._driver: Any = client.driver
        if recorder is not None:
            # Transcripts (docs/transcripts.md): the driver reports what crosses the wire.
            self._driver.recorder = recorder
        self._core = AgentCore(
            options,
            base_url=client.settings.base_url,
            token=client.settings.token,
            chat_id=chat_id,
            last_seen_message_id=last_seen_message_id,
            workspace_files=workspace_files,
            selector=client.selector,
            sink=sink,
            env=os.environ,
        )
        if on_chat_created is not None:
            self._core.session.on_chat_created = _guarded(on_chat_created)
        self._calls = AgentOperations(self._core)
        self._closed = False
        self._setup()

    def _setup(self) -> None:
        """For the adapter: state of its own, set up at the end of construction."""

    def __repr__(self) -> str:
        return (
            f"<CoderAgent chat_id={self.chat_id!r} "
            f"last_seen_message_id={self.last_seen_message_id!r}>"
        )

    @property
    def client(self) -> ClientT:
        """The raw chat client this agent talks through."""
        return self._client

    @property
    def chat_id(self) -> str | None:
        """The session's chat: ``None`` before the first turn created it, or after a reset or a
        fresh-chat stream failure (C.5)."""
        return self._core.session.chat_id

    @property
    def last_seen_message_id(self) -> int | None:
        """The resume cursor (D.1): persist it with ``chat_id`` to resume in another process."""
        return self._core.session.last_seen_message_id

    @property
    def last_known_chat_id(self) -> str | None:
        """The last chat a turn ran on; ``interrupt`` and ``archive`` target it after a reset."""
        return self._core.session.last_known_chat_id

    @property
    def stranded_chat_ids(self) -> tuple[str, ...]:
        """Chats failed fresh-chat turns discarded, oldest first; ``archive`` retires them."""
        return self._core.session.stranded_chat_ids


def check_connection(
    client: object, *, base_url: object, token: object, http_client: object
) -> None:
    """A supplied ``client`` excludes the connection settings that would build one
    (``CoderAgentError`` otherwise)."""
    if client is not None and (
        base_url is not None or token is not None or http_client is not None
    ):
        raise CoderAgentError("pass either client or base_url/token/http_client, not both")


logger = logging.getLogger("coder_proto")


def _guarded(hook: Callable[[str], object]) -> Callable[[str], None]:
    """``hook`` as the session calls it: an exception it raises is logged, not raised into
    the turn (the chat exists by then; the turn goes on)."""

    def call(chat_id: str) -> None:
        try:
            hook(chat_id)
        except Exception:
            logger.warning("on_chat_created raised; the turn goes on", exc_info=True)

    return call
