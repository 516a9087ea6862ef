"""``FakeCoderModel``: the Coder chat server as a pure state machine (server-behaviour 1-8).

No I/O and no clock: every entry point takes ``now`` (monotonic seconds) and first advances
the simulated workers to it. The model answers HTTP requests (``handle_http``), WebSocket
upgrades (``handle_upgrade``, giving a subscription whose ``pull(now)`` yields ready frames),
and runs the workers in ``tick(now)``; ``next_deadline()`` says when the next tick is due.

It is assembled from parts that each do one thing: the ``ChatStore`` (rows, ids, the clock and
the transactions every transition is made of), the ``ModelCatalog``, the ``Subscriptions``
(stream and watch connections), the ``Worker`` (scripted runs) and the route groups (chats,
turns, history, queue, files, deployment). This class is their front door: it authorises each
request, applies the injected request faults, hands the request to its route's handler and
turns every refusal into the error response the real server would send.
"""

from __future__ import annotations

import functools
import logging
import random
from collections.abc import Callable, Iterable, Mapping
from typing import Any, Final

import attrs

from .._constants import MAX_ATTACHMENT_BYTES, MAX_CREATE_BODY_BYTES
from ._catalog import ModelCatalog
from ._chats import Chats
from ._config import FakeConfig
from ._counters import FakeCounters
from ._deployment import Deployment
from ._errors import FakeApiError
from ._extras import ChatExtras
from ._faults import Faults
from ._files import Files, file_too_large
from ._history import History
from ._http import (
    FakeHttpResponse,
    Query,
    error_response,
    json_response,
    lower_headers,
    not_found,
    parse_go_int64,
    parse_json_object,
    parse_target,
    parse_uuid_param,
    redact_target,
    request_token,
    token_matches,
)
from ._queue import Queue
from ._routes import PUBLIC_OPS, READ_ONLY_OPS, UPGRADE_OPS, RouteMatch, match_route
from ._rows import FakeChat, FakeFile, FakeMessage
from ._run import Run
from ._store import ChatStore
from ._stream import StreamSubscription
from ._subscriptions import Subscriptions
from ._turns import Turns
from ._util import new_uuid
from ._watch import WatchSubscription
from ._worker import Worker

__all__ = ["MAX_REQUEST_BODY_BYTES", "FakeCoderModel"]

logger = logging.getLogger("coder_proto")

MAX_REQUEST_BODY_BYTES: Final = 4 * 1024 * 1024
"""The largest body read for a route with no limit of its own: far above any real request, there so
that nothing a client sends grows the server without bound.
"""

#: Body limits of their own (server-behaviour 1.2, 1.3): operation, bytes.
_BODY_LIMITS: Final = {
    "upload_chat_file": MAX_ATTACHMENT_BYTES,
    "create_chat": MAX_CREATE_BODY_BYTES,
    "submit_tool_results": MAX_CREATE_BODY_BYTES,
}

_STATUS_TEXT: Final = {
    400: "Bad Request",
    401: "Unauthorized",
    403: "Forbidden",
    404: "Not Found",
    408: "Request Timeout",
    409: "Conflict",
    425: "Too Early",
    429: "Too Many Requests",
    500: "Internal Server Error",
    502: "Bad Gateway",
    503: "Service Unavailable",
    504: "Gateway Timeout",
}


def _chatd_disabled() -> FakeApiError:
    return FakeApiError(
        503,
        "AI Gateway must be enabled for Coder Agents functionality. Please contact your "
        "deployment administrator.",
        detail="Set CODER_AI_GATEWAY_ENABLED=true on the deployment.",
    )


def _body_too_large() -> FakeApiError:
    return FakeApiError(413, "Request body too large.")


@attrs.frozen
class _Request:
    """One REST request on its way to its handler."""

    route: RouteMatch
    query: Query
    headers: Mapping[str, str]
    body: bytes
    now: float


_Handler = Callable[[_Request], FakeHttpResponse]
_NO_CONTENT: Final = FakeHttpResponse(status=204)


class FakeCoderModel:
    """The fake server's state and behaviour (see the module docstring).

    ``config`` is the profile (``FakeConfig``), ``faults`` the injected failures
    (``Faults``), ``counters`` what was seen (``FakeCounters``). ``chats`` maps chat ids to
    their rows (``FakeChat``): read it in tests, change it through requests.
    """

    def __init__(self, config: FakeConfig | None = None, faults: Faults | None = None) -> None:
        self.config = config if config is not None else FakeConfig()
        self.faults = faults if faults is not None else Faults(seed=self.config.seed)
        self.counters = FakeCounters()
        rng = random.Random(self.config.seed)
        organization_id = self.config.organization_id or new_uuid(rng)
        self.store = ChatStore(
            self.config, rng, organization_id=organization_id, user_id=new_uuid(rng)
        )
        created_at = self.store.timestamp(0.0)
        self.catalog = ModelCatalog(
            self.config, rng, organization_id=organization_id, created_at=created_at
        )
        self.subscriptions = Subscriptions(self.store, self.faults, self.counters, self.tick)
        self.worker = Worker(self.store, self.catalog, self.subscriptions, self.faults)
        self._chats = Chats(self.store, self.catalog, self.worker, self.subscriptions)
        self._turns = Turns(self.store, self.catalog, self.worker, self.subscriptions)
        self._history = History(self.store)
        self._queue = Queue(self.store, self.catalog, self.worker, self.subscriptions)
        self._files = Files(self.store)
        self._deployment = Deployment(self.store, created_at=created_at)
        self._extras = ChatExtras(self.store, self.worker, self.subscriptions)
        self._handlers = self._handler_table()

    # -- what tests read ------------------------------------------------------------------------

    @property
    def token(self) -> str:
        """The session token requests must carry (never logged)."""
        return self.config.token

    @property
    def organization_id(self) -> str:
        return self.store.organization_id

    @property
    def user_id(self) -> str:
        return self.store.user_id

    @property
    def chats(self) -> dict[str, FakeChat]:
        return self.store.chats

    @property
    def files(self) -> dict[str, FakeFile]:
        return self.store.files

    @property
    def runs(self) -> dict[str, Run]:
        return self.worker.runs

    @property
    def model_config_ids(self) -> dict[str, str]:
        """Config ids by model name."""
        return self.catalog.config_ids

    def chat(self, chat_id: str) -> FakeChat:
        """The chat row; ``KeyError`` when unknown."""
        return self.store.chats[chat_id]

    def timestamp(self, now: float) -> str:
        """RFC 3339 wall-clock text for monotonic ``now``."""
        return self.store.timestamp(now)

    # -- time -----------------------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """Advance every simulated worker and timer to ``now`` (idempotent; time never goes
        backwards). Events are processed at their scheduled times, so the outcome does not
        depend on how often ``tick`` is called."""
        self.worker.tick(now)

    def next_deadline(self) -> float | None:
        """The monotonic time of the next worker or timer event, or ``None``."""
        return self.worker.next_deadline()

    def drain_advanced(self) -> set[str]:
        """The ids of chats whose workers or timers advanced since the last call, so an
        adapter can wake only the connections that may have something to send."""
        return self.worker.drain_advanced()

    def drain_touched(self) -> set[str]:
        """The ids of the chats that requests, operations and workers may have changed since
        the last call: every chat a transaction began on, and for each request that is not
        read-only the chat its path names with its root and sub-agent chats. An adapter wakes
        the streams of these chats after a request (and every watch); a stream of any other
        chat has nothing new to send."""
        return self.store.drain_touched()

    # -- operations without HTTP ------------------------------------------------------------------

    def create_chat(self, body: Mapping[str, Any], now: float) -> FakeChat:
        """``POST /chats`` with a parsed body; ``FakeApiError`` when refused."""
        self.tick(now)
        return self._chats.create(body, now)

    def revise_message(
        self, chat_id: str, message_id: int, content: list[dict[str, Any]], now: float
    ) -> FakeMessage:
        """Rewrite a committed message in place, as a lifecycle hook rewriting tool-call
        input does: a new revision under the same id, which every stream re-sends as a
        ``message`` event whatever its ``after_id`` (server-behaviour 3.3). Best used while no
        step is streaming: a history change starts a new episode. ``KeyError`` when the chat
        or visible message does not exist."""
        self.tick(now)
        return self._history.revise(self.store.chats[chat_id], message_id, content, now)

    def spawn_child(self, parent_id: str, prompt: str, now: float) -> FakeChat:
        """Start a sub-agent chat under root chat ``parent_id``, as the root's agent does with
        its spawn tool: it runs ``prompt`` at once (the script book picks its script), shows
        in the root's ``children`` (never in the chat list), shares the root's archive state
        and counts in the root's cost. ``KeyError`` for an unknown chat, ``ValueError`` when
        ``parent_id`` is itself a sub-agent chat."""
        self.tick(now)
        return self._chats.spawn_child(self.store.chats[parent_id], prompt, now)

    # -- HTTP -----------------------------------------------------------------------------------

    def _handler_table(self) -> dict[str, _Handler]:
        """Every REST operation's handler (the upgrade routes answer 426 to plain GETs)."""
        chat_scoped: dict[str, Callable[[FakeChat, _Request], FakeHttpResponse]] = {
            "get_chat": lambda chat, req: self._ok(self.store.chat_json(chat)),
            "update_chat": self._update_chat,
            "get_messages": lambda chat, req: self._ok(self._history.page(chat, req.query)),
            "create_chat_message": self._send_message,
            "edit_chat_message": self._edit_message,
            "interrupt_chat": self._interrupt,
            "submit_tool_results": self._submit_tool_results,
            "edit_queued_message": self._edit_queued,
            "delete_queued_message": self._delete_queued,
            "promote_queued_message": self._promote_queued,
            "get_chat_cost": lambda chat, req: self._ok(self._chats.cost_json(chat)),
            "get_chat_prompts": lambda chat, req: self._ok(self._extras.prompts(chat, req.query)),
            "compact_chat": self._compact,
            "clear_chat": self._clear,
            "reconcile_chat": lambda chat, req: self._extras.reconcile(chat),
            "propose_chat_title": lambda chat, req: self._ok(self._extras.propose_title(chat)),
            "get_chat_diff": lambda chat, req: self._ok(self._extras.diff(chat, req.query)),
            # The fake has no workspace agent: there is no newer context to pin.
            "refresh_chat_context": lambda chat, req: self._ok(self.store.chat_json(chat)),
        }
        table: dict[str, _Handler] = {
            "list_chats": lambda req: self._ok(self._chats.search(req.query)),
            "create_chat": self._create_chat,
            "upload_chat_file": self._upload,
            "get_chat_file": lambda req: self._files.download(req.route.params["file"]),
            "get_chat_file_download_url": lambda req: self._ok(
                self._extras.download_url(req.route.params["file"], req.now)
            ),
            "download_chat_file": lambda req: self._extras.download(
                req.route.params["file"], req.query, req.now
            ),
            "get_chats_by_workspace": lambda req: self._ok(self._extras.by_workspace(req.query)),
            "list_models": self._list_org_models,
            "list_models_default_org": lambda req: self._ok(self.catalog.catalog_json()),
            "list_model_configs": lambda req: self._ok(self.catalog.configs_json()),
            "get_user": self._get_user,
            "get_buildinfo": lambda req: self._ok(self._deployment.buildinfo_json()),
        }
        for op, handle in chat_scoped.items():
            table[op] = functools.partial(self._on_chat, handle)
        return table

    def _ok(self, value: Any, status: int = 200) -> FakeHttpResponse:
        return json_response(status, value, html_escape=self.config.html_escape)

    def _on_chat(
        self, handle: Callable[[FakeChat, _Request], FakeHttpResponse], req: _Request
    ) -> FakeHttpResponse:
        chat = self._lookup_chat(req.route)
        if req.route.op not in READ_ONLY_OPS:
            self.store.touch_family(chat)
        return handle(chat, req)

    def _create_chat(self, req: _Request) -> FakeHttpResponse:
        chat = self._chats.create(parse_json_object(req.body), req.now)
        return self._ok(self.store.chat_json(chat), 201)

    def _upload(self, req: _Request) -> FakeHttpResponse:
        stored = self._files.upload(req.query, req.headers, req.body, req.now)
        return self._ok({"id": stored.id}, 201)

    def _list_org_models(self, req: _Request) -> FakeHttpResponse:
        if req.route.params["org"].lower() != self.organization_id:
            raise not_found()
        return self._ok(self.catalog.catalog_json())

    def _get_user(self, req: _Request) -> FakeHttpResponse:
        return self._ok(self._deployment.user_json(req.route.params["user"], req.now))

    def _update_chat(self, chat: FakeChat, req: _Request) -> FakeHttpResponse:
        self._chats.update(chat, parse_json_object(req.body), req.now)
        return _NO_CONTENT

    def _send_message(self, chat: FakeChat, req: _Request) -> FakeHttpResponse:
        return self._ok(self._turns.send_message(chat, parse_json_object(req.body), req.now))

    def _edit_message(self, chat: FakeChat, req: _Request) -> FakeHttpResponse:
        body = parse_json_object(req.body)
        message_id = req.route.params["message"]
        return self._ok(self._turns.edit_message(chat, message_id, body, req.now))

    def _compact(self, chat: FakeChat, req: _Request) -> FakeHttpResponse:
        return self._ok(self.store.chat_json(self._extras.compact(chat, req.now)))

    def _clear(self, chat: FakeChat, req: _Request) -> FakeHttpResponse:
        return self._ok(self.store.chat_json(self._extras.clear(chat, req.now)))

    def _interrupt(self, chat: FakeChat, req: _Request) -> FakeHttpResponse:
        return self._ok(self.store.chat_json(self._turns.interrupt(chat, req.now)))

    def _submit_tool_results(self, chat: FakeChat, req: _Request) -> FakeHttpResponse:
        self._turns.submit_tool_results(chat, parse_json_object(req.body), req.now)
        return _NO_CONTENT

    def _edit_queued(self, chat: FakeChat, req: _Request) -> FakeHttpResponse:
        body = parse_json_object(req.body)
        self._queue.edit(chat, req.route.params["queued"], body, req.now)
        return _NO_CONTENT

    def _delete_queued(self, chat: FakeChat, req: _Request) -> FakeHttpResponse:
        self._queue.delete(chat, req.route.params["queued"], req.now)
        return _NO_CONTENT

    def _promote_queued(self, chat: FakeChat, req: _Request) -> FakeHttpResponse:
        self._queue.promote(chat, req.route.params["queued"], req.now)
        return self._ok({"message": "Queued message promotion accepted."}, 202)

    def _authorise(self, headers: Mapping[str, str], query: Query) -> None:
        token = request_token(headers, query)
        if token is None:
            raise FakeApiError(
                401,
                'Cookie "coder_session_token" or query parameter must be provided.',
            )
        if not token_matches(token, self.config.token):
            raise FakeApiError(401, "API key is invalid.")

    def _lookup_chat(self, route: RouteMatch) -> FakeChat:
        chat = self.store.chats.get(parse_uuid_param(route.params["chat"]))
        if chat is None:
            raise not_found()
        return chat

    @staticmethod
    def _fault_ops(route: RouteMatch, body: bytes) -> tuple[str, ...]:
        if route.op == "update_chat" and b'"archived"' in body:
            return (route.op, "archive_chat")
        return (route.op,)

    def handle_http(
        self,
        method: str,
        target: str,
        headers: Mapping[str, str] | Iterable[tuple[str, str]],
        body: bytes,
        now: float,
    ) -> FakeHttpResponse:
        """Answer one REST request (server-behaviour 1). ``headers`` may be a mapping or
        pairs; names are matched case-insensitively. Never raises for bad input: every
        refusal is an error response."""
        self.tick(now)
        hdrs = lower_headers(headers)
        path, query = parse_target(target)
        method = method.upper()
        route = self._match_route(method, path)
        op = route.op if isinstance(route, RouteMatch) else "unknown"
        delay = 0.0
        try:
            if isinstance(route, FakeApiError):
                raise route
            if op not in PUBLIC_OPS:
                self._authorise(hdrs, query)
            chat_id = route.params.get("chat", "").lower() or None
            failure = self.faults.claim_request_failure(self._fault_ops(route, body), chat_id)
            if failure is not None:
                logger.debug("fake server: injected %d for %s", failure.status, op)
                raise FakeApiError(
                    failure.status,
                    failure.message or _STATUS_TEXT.get(failure.status, "Injected failure."),
                    detail=failure.detail,
                )
            delay = self.faults.claim_request_delay(self._fault_ops(route, body), chat_id)
            if self.faults.chatd_disabled and op not in READ_ONLY_OPS:
                raise _chatd_disabled()
            if op in UPGRADE_OPS:
                self._check_upgrade(route, query)
                raise FakeApiError(426, "WebSocket upgrade required.")
            if len(body) > _BODY_LIMITS.get(op, MAX_REQUEST_BODY_BYTES):
                raise file_too_large() if op == "upload_chat_file" else _body_too_large()
            response = self._handlers[op](_Request(route, query, hdrs, body, now))
        except FakeApiError as exc:
            response = error_response(exc)
        if delay:
            response = attrs.evolve(response, delay=delay)
        self.counters.record(method, redact_target(target), op, response.status)
        return response

    # -- request bodies -------------------------------------------------------------------------

    def _match_route(self, method: str, path: str) -> RouteMatch | FakeApiError:
        return match_route(
            method,
            path,
            legacy_only=self.config.legacy_only,
            experimental_mount=self.config.experimental_mount,
        )

    def _route_op(self, method: str, target: str) -> str:
        path, _query = parse_target(target)
        route = self._match_route(method.upper(), path)
        return route.op if isinstance(route, RouteMatch) else "unknown"

    def body_limit(self, method: str, target: str) -> int:
        """The largest request body the route of ``method target`` reads, in bytes: 10 MiB
        for uploads, 256 KiB for creating a chat and submitting tool results
        (server-behaviour 1.2, 1.3), ``MAX_REQUEST_BODY_BYTES`` for any other request."""
        return _BODY_LIMITS.get(self._route_op(method, target), MAX_REQUEST_BODY_BYTES)

    def refuse_body(self, method: str, target: str, now: float) -> FakeHttpResponse:
        """The 413 for a request whose body is over ``body_limit``, counted like any answer;
        an adapter sends it as soon as it knows, without reading (the rest of) the body."""
        self.tick(now)
        op = self._route_op(method, target)
        error = file_too_large() if op == "upload_chat_file" else _body_too_large()
        response = error_response(error)
        self.counters.record(method.upper(), redact_target(target), op, response.status)
        return response

    # -- WebSocket upgrades -----------------------------------------------------------------------

    def _check_upgrade(self, route: RouteMatch, query: Query) -> tuple[FakeChat | None, int]:
        """The checks the server runs before accepting a stream or watch socket
        (server-behaviour 3.1): unknown chat 404, bad ``after_id`` 400."""
        if route.op == "watch_chats":
            return None, 0
        chat = self._lookup_chat(route)
        raw = query.get("after_id")
        after_id = 0
        if raw is not None and raw != "":
            try:
                after_id = parse_go_int64(raw)
            except ValueError as exc:
                raise FakeApiError(400, "Invalid after_id parameter.", detail=str(exc)) from None
        return chat, after_id

    def handle_upgrade(
        self,
        target: str,
        headers: Mapping[str, str] | Iterable[tuple[str, str]],
        now: float,
    ) -> StreamSubscription | WatchSubscription | FakeHttpResponse:
        """Answer a WebSocket upgrade request: a subscription to accept, or the HTTP
        rejection to send instead (401, 404, 400, 503, or an injected status)."""
        self.tick(now)
        hdrs = lower_headers(headers)
        path, query = parse_target(target)
        route = self._match_route("GET", path)
        op = route.op if isinstance(route, RouteMatch) else "unknown"
        try:
            if isinstance(route, FakeApiError):
                raise route
            if route.op not in UPGRADE_OPS:
                raise FakeApiError(400, "This route does not accept WebSocket upgrades.")
            self._authorise(hdrs, query)
            chat_id = route.params.get("chat", "").lower() or None
            if route.op == "stream_chat" and chat_id is not None:
                self.counters.stream_dials[chat_id] += 1
            else:
                self.counters.watch_dials += 1
            if self.faults.chatd_disabled:
                raise _chatd_disabled()
            chat, after_id = self._check_upgrade(route, query)
            rejection = self.faults.claim_upgrade_rejection(
                "stream" if chat is not None else "watch", chat_id
            )
            if rejection is not None:
                logger.debug("fake server: upgrade rejected with %d", rejection.status)
                raise FakeApiError(
                    rejection.status,
                    rejection.message or _STATUS_TEXT.get(rejection.status, "Injected failure."),
                )
        except FakeApiError as exc:
            response = error_response(exc)
            self.counters.record("GET", redact_target(target), op, response.status)
            return response
        self.counters.record("GET", redact_target(target), op, 101)
        if chat is None:
            return self.open_watch(now)
        return self.open_stream(chat.id, after_id, now)

    def open_stream(self, chat_id: str, after_id: int, now: float) -> StreamSubscription:
        """Subscribe to a chat's stream as a connection would (server-behaviour 3); the first
        ``pull`` returns the snapshot. ``KeyError`` for an unknown chat."""
        self.tick(now)
        return self.subscriptions.open_stream(self.store.chats[chat_id], after_id)

    def open_watch(self, now: float) -> WatchSubscription:
        """Subscribe to the watch stream (server-behaviour 6): events from now on only."""
        self.tick(now)
        return self.subscriptions.open_watch()
