"""``CoderChatClient`` of the event-loop adapters: every raw chat operation as an ``async``
method (wire 2, 6, 7, 8, 9; D4, D10, D11, D16, D17, D20-D24).

The operations are defined once in the core (``coder_proto.calls.ChatOperations``: signatures,
docstrings, argument checks, the machine each one runs); this module turns each into an
``async`` method that performs it: the file of an upload is read in a worker thread, the
machine is awaited on the client's ``Driver``. The client holds the state wire 1 gives a
client: one ``PrefixSelector`` (the negotiated chat prefix) and one ``http:*`` event counter.
An adapter's client is this class with its ``Driver`` and ``ChatWatch`` classes.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import TYPE_CHECKING, Any, ClassVar, Concatenate, ParamSpec, TypeVar

from coder_io_common.closing import AsyncClosing
from coder_proto import (
    CoderAgentError,
    WatchBackoff,
)
from coder_proto.adapter import (
    ChatOperations,
    ClientShell,
    Operation,
    TransportEventSink,
    public_method,
)

from .driver import Driver, transport_sink
from .runtime import AsyncRuntime
from .watch import ChatWatch

if TYPE_CHECKING:
    import httpx  # noqa: F401 (named by the base class)

__all__ = ["CoderChatClient", "operation"]

P = ParamSpec("P")
T = TypeVar("T")


def operation(
    spec: Callable[Concatenate[Any, P], Operation[T]], *, owner: str
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    """The ``async`` method of ``owner`` (``CoderChatClient`` or ``CoderAgent``) for a core
    operation: it builds the ``Operation`` from the object's ``_calls`` and awaits
    ``_perform(call)``. Name, docstring and signature are the operation's."""

    async def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = await self._perform(spec(self._calls, *args, **kwargs))
        return result

    return public_method(method, spec, owner=owner)


def _op(
    spec: Callable[Concatenate[ChatOperations, P], Operation[T]],
) -> Callable[Concatenate[Any, P], Coroutine[Any, Any, T]]:
    return operation(spec, owner="CoderChatClient")


# httpx is imported by the driver, when a client is made: importing the adapter does not load it.
class CoderChatClient(ClientShell["httpx.AsyncClient"], AsyncClosing):
    """The raw Coder chat API on an event loop.

    ``base_url`` and ``token`` default to ``CODER_URL`` / ``CODER_SESSION_TOKEN`` (explicit
    values win; a missing one raises ``CoderAgentError``); one trailing ``/`` is removed.
    ``http_client`` (an ``httpx.AsyncClient``) is used as given (its transport, headers and
    timeouts; D23) and never closed by this client; otherwise one is created (no read timeout,
    30 s connect timeout) and closed by ``aclose()`` / ``async with``. ``verify`` is the TLS
    setting of the stream sockets and of the created HTTP client (``True``, ``False``, a CA
    bundle path or an ``ssl.SSLContext``). A REST call no turn deadline bounds ends within
    ``http_timeout`` seconds (60; ``None`` for none, D29), however slowly the server answers,
    and reads at most ``max_response_bytes`` of body (32 MiB; a larger one fails the call
    with ``CoderProtocolError``, D30). ``on_transport_event`` receives the ``http:*``
    events (wire 11, D24); it may be a coroutine function. ``prefix`` pins the chat prefix
    (otherwise it is negotiated, wire 1.4). ``recorder`` (a
    ``coder_proto.transcript.Recorder``) is told what crosses the wire
    (``docs/transcripts.md``). Construction does no I/O and needs no running loop. The
    client's background work (D22) runs in tasks owned by the client, and ``aclose`` awaits it
    (at most 10 s). The token never appears in a repr, an error, a log record or an event.
    """

    #: The adapter's ``Driver`` (it names the runtime) and ``ChatWatch`` classes.
    _driver_class: ClassVar[type[Driver]]
    _watch_class: ClassVar[type[ChatWatch]]
    driver: Driver

    @property
    def _runtime(self) -> AsyncRuntime:
        return self._driver_class.runtime

    def _make_sink(self, callback: Callable[[Any], object] | None) -> TransportEventSink:  # type: ignore[override]
        return transport_sink(callback, self._runtime)

    def _setup(self) -> None:
        self._runtime.prepare_http()
        # D29, D30: the REST bounds of the client's settings.
        self.driver.http_timeout = self.settings.http_timeout
        self.driver.max_response_bytes = self.settings.max_response_bytes

    # -- life cycle ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close what this client created: background jobs are awaited (at most 10 s, D22),
        sockets closed, and the HTTP client closed unless it was supplied. Idempotent."""
        await self.driver.aclose()

    async def _perform(self, call: Operation[T]) -> T:
        """Perform one operation: read its file (``runtime.read_upload``), then run it on the
        driver (in its session's scope, if any); the core builds its machine."""
        driver = self.driver
        with driver.calling():
            data = None if call.read is None else await self._runtime.read_upload(call.read)
            result: T = await driver.call(call, data=data).result()
        return result

    # -- the operations (coder_proto.calls.ChatOperations) ------------------------------------------

    create_chat = _op(ChatOperations.create_chat)
    get_chat = _op(ChatOperations.get_chat)
    list_chats = _op(ChatOperations.list_chats)
    update_chat = _op(ChatOperations.update_chat)
    archive_chat = _op(ChatOperations.archive_chat)
    interrupt_chat = _op(ChatOperations.interrupt_chat)
    get_chat_cost = _op(ChatOperations.get_chat_cost)
    compact_chat = _op(ChatOperations.compact_chat)
    clear_chat = _op(ChatOperations.clear_chat)
    reconcile_chat = _op(ChatOperations.reconcile_chat)
    refresh_chat_context = _op(ChatOperations.refresh_chat_context)
    propose_chat_title = _op(ChatOperations.propose_chat_title)
    get_chat_diff = _op(ChatOperations.get_chat_diff)
    get_chats_by_workspace = _op(ChatOperations.get_chats_by_workspace)
    create_chat_message = _op(ChatOperations.create_chat_message)
    get_messages = _op(ChatOperations.get_messages)
    edit_chat_message = _op(ChatOperations.edit_chat_message)
    get_chat_prompts = _op(ChatOperations.get_chat_prompts)
    submit_tool_results = _op(ChatOperations.submit_tool_results)
    delete_queued_message = _op(ChatOperations.delete_queued_message)
    edit_queued_message = _op(ChatOperations.edit_queued_message)
    promote_queued_message = _op(ChatOperations.promote_queued_message)
    upload_chat_file = _op(ChatOperations.upload_chat_file)
    get_chat_file = _op(ChatOperations.get_chat_file)
    get_chat_file_download_url = _op(ChatOperations.get_chat_file_download_url)
    list_model_configs = _op(ChatOperations.list_model_configs)
    resolve_model_config_id = _op(ChatOperations.resolve_model_config_id)
    preview_url = _op(ChatOperations.preview_url)
    share_port = _op(ChatOperations.share_port)

    # -- watch (wire 6) -----------------------------------------------------------------------

    def watch_chats(self, *, backoff: WatchBackoff | None = None) -> ChatWatch:
        """Lifecycle events of every chat visible to the user (wire 6): use as
        ``async with client.watch_chats() as watch: async for event in watch``."""
        if self.driver.closed:
            raise CoderAgentError("this client is closed")
        return self._watch_class(self, backoff=backoff)

