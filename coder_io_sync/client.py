"""``CoderChatClient``, blocking: every raw chat operation as a plain method (wire 2, 6, 7, 8,
9; D4, D10, D11, D16, D17, D20-D24).

The operations are defined once in the core (``coder_proto._shells.client_calls.ChatCalls``: signatures,
docstrings, argument checks, the machine each one runs); this module turns each into a
blocking method that performs it in the calling thread: the file of an upload is read, the
machine is built under the driver's lock and run on the client's ``Driver``. The client
holds the state wire 1 gives a client: one ``PrefixSelector`` (the negotiated chat prefix)
and one ``http:*`` event counter.

Threads: a client may be shared between threads when its ``httpx.Client`` may be (the one it
creates is): each thread performs its own requests, and the machines (with the prefix
negotiation they share) are stepped under the driver's lock.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any, ClassVar, Concatenate, ParamSpec, TypeVar

import httpx

from coder_io_common.closing import Closing
from coder_io_common.files import read_upload_path
from coder_proto import CoderAgentError, WatchBackoff
from coder_proto._rest.uploads import UploadPlan
from coder_proto._shells.client_calls import Call, ChatCalls, public_method
from coder_proto._shells.client_shell import ClientShell
from coder_proto._shells.watch_feed import standalone_watch
from coder_proto._transport_events import TransportEventSink

from ._driver import Driver, sigint_deferred, transport_sink
from .watch import ChatWatch

__all__ = ["CoderChatClient", "watch_chats"]

P = ParamSpec("P")
T = TypeVar("T")


def operation(
    spec: Callable[Concatenate[Any, P], Call[T]], *, owner: str
) -> Callable[Concatenate[Any, P], T]:
    """The blocking method of ``owner`` (``CoderChatClient`` or ``CoderAgent``) for a core
    operation: it builds the ``Call`` from the object's ``_calls`` and returns
    ``_perform(call)``. Name, docstring and signature are the operation's."""

    def method(self: Any, /, *args: P.args, **kwargs: P.kwargs) -> T:
        result: T = self._perform(spec(self._calls, *args, **kwargs))
        return result

    return public_method(method, spec, owner=owner)


def _op(spec: Callable[Concatenate[ChatCalls, P], Call[T]]) -> Callable[Concatenate[Any, P], T]:
    return operation(spec, owner="CoderChatClient")


class CoderChatClient(ClientShell[httpx.Client], Closing):
    """The raw Coder chat API, blocking.

    ``base_url`` and ``token`` default to ``CODER_URL`` / ``CODER_SESSION_TOKEN`` (explicit
    values win; a missing one raises ``CoderAgentError``); one trailing ``/`` is removed.
    ``http_client`` (an ``httpx.Client``) is used as given (its transport, headers and
    timeouts; D23) and never closed by this client; otherwise one is created (30 s connect
    timeout) and closed by ``close()`` / ``with``. ``verify`` is the TLS setting
    of the stream sockets and of the created HTTP client (``True``, ``False``, a CA bundle
    path or an ``ssl.SSLContext``). A REST call no other deadline bounds ends within
    ``http_timeout`` seconds (60; ``None`` for none, D29), however slowly the server answers,
    and reads at most ``max_response_bytes`` of body (32 MiB; a larger one fails the call
    with ``CoderProtocolError``, D30). ``on_transport_event`` receives the ``http:*`` events
    (wire 11, D24); it must be a plain function. ``prefix`` pins the chat prefix (otherwise it
    is negotiated, wire 1.4). ``recorder`` (a ``coder_proto.transcript.Recorder``) is told
    what crosses the wire (``docs/transcripts.md``). Construction does no I/O. The token never
    appears in a repr, an error, a log record or an event.
    """

    _driver_class: ClassVar[Any] = Driver
    driver: Driver

    @staticmethod
    def _make_sink(callback: Callable[[Any], object] | None) -> TransportEventSink:
        return transport_sink(callback)

    def _setup(self) -> None:
        # D29, D30: the REST bounds of the client's settings.
        self.driver.http_timeout = self.settings.http_timeout
        self.driver.max_response_bytes = self.settings.max_response_bytes

    # -- life cycle ---------------------------------------------------------------------------

    def close(self) -> None:
        """Close what this client created: background jobs are waited for (at most 10 s,
        D22), sockets closed, and the HTTP client closed unless it was supplied. Idempotent."""
        self.driver.close()

    def _perform(self, call: Call[T]) -> T:
        """Perform one operation in the calling thread: read its file, then run it on the
        driver (its machine is built under the driver's lock: the prefix selector is shared
        with the machines other threads run). Ctrl-C waits for a blocking point."""
        with sigint_deferred():
            data = None if call.read is None else _read_upload(call.read)
            result: T = self.driver.call(call, data=data).result()
            return result

    # -- the operations (coder_proto._shells.client_calls.ChatCalls) ------------------------------------------

    create_chat = _op(ChatCalls.create_chat)
    get_chat = _op(ChatCalls.get_chat)
    list_chats = _op(ChatCalls.list_chats)
    update_chat = _op(ChatCalls.update_chat)
    archive_chat = _op(ChatCalls.archive_chat)
    interrupt_chat = _op(ChatCalls.interrupt_chat)
    get_chat_cost = _op(ChatCalls.get_chat_cost)
    compact_chat = _op(ChatCalls.compact_chat)
    clear_chat = _op(ChatCalls.clear_chat)
    reconcile_chat = _op(ChatCalls.reconcile_chat)
    refresh_chat_context = _op(ChatCalls.refresh_chat_context)
    propose_chat_title = _op(ChatCalls.propose_chat_title)
    get_chat_diff = _op(ChatCalls.get_chat_diff)
    get_chats_by_workspace = _op(ChatCalls.get_chats_by_workspace)
    create_chat_message = _op(ChatCalls.create_chat_message)
    get_messages = _op(ChatCalls.get_messages)
    edit_chat_message = _op(ChatCalls.edit_chat_message)
    get_chat_prompts = _op(ChatCalls.get_chat_prompts)
    submit_tool_results = _op(ChatCalls.submit_tool_results)
    delete_queued_message = _op(ChatCalls.delete_queued_message)
    edit_queued_message = _op(ChatCalls.edit_queued_message)
    promote_queued_message = _op(ChatCalls.promote_queued_message)
    upload_chat_file = _op(ChatCalls.upload_chat_file)
    get_chat_file = _op(ChatCalls.get_chat_file)
    get_chat_file_download_url = _op(ChatCalls.get_chat_file_download_url)
    list_model_configs = _op(ChatCalls.list_model_configs)
    resolve_model_config_id = _op(ChatCalls.resolve_model_config_id)
    preview_url = _op(ChatCalls.preview_url)
    share_port = _op(ChatCalls.share_port)

    # -- watch (wire 6) -----------------------------------------------------------------------

    def watch_chats(self, *, backoff: WatchBackoff | None = None) -> ChatWatch:
        """Lifecycle events of every chat visible to the user (wire 6): use as
        ``with client.watch_chats() as watch: for event in watch``."""
        if self.driver.closed:
            raise CoderAgentError("this client is closed")
        return ChatWatch(self, backoff=backoff)


#: The standalone watch (wire 1.5, 6): a ``ChatWatch`` over a client of its own.
watch_chats = standalone_watch(CoderChatClient, ChatWatch)


def _read_upload(plan: UploadPlan) -> object:
    """The bytes of a path or file-object upload. A path over 10 MiB is refused before it is
    read (wire 7); read errors are ``CoderAgentError``; a file object whose ``read`` is a
    coroutine function is refused (the blocking adapter reads plain files)."""
    if plan.path is not None:
        return read_upload_path(plan.path)
    read = plan.stream.read
    if inspect.iscoroutinefunction(read):
        raise CoderAgentError(
            "the file object's read() is a coroutine function; the blocking adapter "
            "(coder_io_sync) needs a plain binary file object"
        )
    try:
        return read()
    except OSError as exc:
        raise CoderAgentError(f"cannot read the file to upload: {exc}") from exc
