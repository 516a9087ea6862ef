"""The library's error hierarchy (wire section 10; D21-D22).

Every failure the core recognises becomes one of these classes; adapters only raise what the
core built. ``CoderAgentError`` is the base of all of them, ``CoderStreamError`` included (D21).

All errors are picklable (they cross process boundaries in workers and durable engines) and
none of them ever holds the session token: the token lives in one request header and nowhere
else.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

__all__ = [
    "MAX_DETAIL",
    "CoderAgentError",
    "CoderApiError",
    "CoderChatError",
    "CoderNetworkError",
    "CoderProtocolError",
    "CoderStreamError",
    "api_error_message",
    "clip",
    "is_retryable_status",
]

#: What an error keeps of any text a server sent (D30): 8 KiB, with a note of the full size.
MAX_DETAIL = 8192


def clip(text: str, limit: int = MAX_DETAIL) -> str:
    """``text`` cut to at most ``limit`` characters, ending with a note of its full size when
    cut (a clipped text is returned as is: clipping twice changes nothing)."""
    if len(text) <= limit:
        return text
    note = f" [... cut: {len(text)} characters in full]"
    return text[: max(0, limit - len(note))] + note


def _clip_validations(items: tuple[Any, ...] | None) -> tuple[Any, ...] | None:
    """The field errors that fit in ``MAX_DETAIL`` characters of ``repr`` (D30)."""
    if items is None:
        return None
    kept: list[Any] = []
    size = 0
    for item in items:
        size += len(repr(item)) + 2  # with the separator
        if size > MAX_DETAIL:
            break
        kept.append(item)
    return tuple(kept)


#: Statuses the README advises retrying (D21): request timeout, too early, rate limited.
_RETRYABLE_4XX = frozenset({408, 425, 429})


def is_retryable_status(status: int) -> bool:
    """True for 408, 425, 429 and every 5xx (D21)."""
    return status in _RETRYABLE_4XX or 500 <= status <= 599


class CoderAgentError(Exception):
    """Base class of every error this library raises.

    ``chat_id`` names the chat the failure belongs to when one is known. ``retryable`` says
    whether repeating the same operation may succeed; it is ``False`` unless a subclass knows
    better.
    """

    retryable: bool = False

    def __init__(self, message: str, *, chat_id: str | None = None) -> None:
        message = clip(message)
        super().__init__(message)
        self.message = message
        self.chat_id = chat_id

    def __str__(self) -> str:
        return self.message

    def _state(self) -> dict[str, Any]:
        return {"chat_id": self.chat_id}

    def __reduce__(self) -> tuple[Any, ...]:
        # Keyword-only constructor fields survive pickling; notes ride in the instance dict and
        # the cause is carried explicitly (BaseException does not pickle it).
        return (_rebuild, (type(self), self._message_arg(), self._state()), self._pickle_dict())

    def _message_arg(self) -> str:
        return self.message

    def _pickle_dict(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        cause = self.__cause__
        if cause is not None:
            import pickle  # only an error being pickled (or copied) needs it

            try:
                pickle.dumps(cause)
            except Exception:
                cause = CoderAgentError(f"{type(cause).__name__}: {cause}")
            state["__cause__"] = cause
        return state

    def __setstate__(self, state: dict[str, Any] | None) -> None:
        state = dict(state or {})
        cause = state.pop("__cause__", None)
        self.__dict__.update(state)
        if cause is not None:
            self.__cause__ = cause

    def __repr__(self) -> str:
        fields = ", ".join(f"{k}={v!r}" for k, v in self._state().items() if v is not None)
        return f"{type(self).__name__}({self.message!r}{', ' + fields if fields else ''})"


def _rebuild(cls: type[CoderAgentError], message: str, state: dict[str, Any]) -> CoderAgentError:
    return cls(message, **state)


class CoderProtocolError(CoderAgentError):
    """The remote side sent something structurally wrong (a malformed frame, a body of the
    wrong shape). Raised by the wire model's parsers instead of ``KeyError``/``TypeError``."""


def api_error_message(method: str, path: str, status: int, message: str, detail: str | None) -> str:
    """``Coder API {METHOD} {path} failed ({status}): {message}[ — {detail}]`` (wire 10)."""
    text = f"Coder API {method.upper()} {path} failed ({status}): {message}"
    if detail:
        text += f" — {detail}"
    return text


class CoderApiError(CoderAgentError):
    """A REST request answered with a non-2xx status, or a WebSocket upgrade was rejected with
    a terminal status (wire 10, D12).

    ``path`` is the path actually requested, query included. ``server_message`` is the body's
    ``message`` (else the status text, else ``"request failed"``), ``detail`` the body's
    ``detail``, ``validations`` the body's field errors.
    """

    def __init__(
        self,
        message: str | None = None,
        *,
        status: int,
        method: str,
        path: str,
        server_message: str | None = None,
        detail: str | None = None,
        validations: tuple[Any, ...] | None = None,
        kind: str | None = None,
        chat_id: str | None = None,
    ) -> None:
        if server_message is None:
            server_message = _status_text(status)
        server_message = clip(server_message)
        detail = None if detail is None else clip(detail)
        validations = _clip_validations(validations)
        if message is None:
            message = api_error_message(method, path, status, server_message, detail)
        super().__init__(message, chat_id=chat_id)
        self.status = status
        self.method = method.upper()
        self.path = path
        self.server_message = server_message
        self.detail = detail
        self.validations = validations
        self.kind = kind
        #: True for 408, 425, 429 and 5xx (D21).
        self.retryable = is_retryable_status(status)

    def _state(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "method": self.method,
            "path": self.path,
            "server_message": self.server_message,
            "detail": self.detail,
            "validations": self.validations,
            "kind": self.kind,
            "chat_id": self.chat_id,
        }


def _status_text(status: int) -> str:
    try:
        return HTTPStatus(status).phrase or "request failed"
    except ValueError:
        return "request failed"


class CoderNetworkError(CoderAgentError):
    """A REST request failed before any response arrived (connection refused, reset, DNS,
    TLS, a user-supplied client's timeout). Always retryable; the cause is chained (D21, D23).
    """

    retryable = True

    def __init__(
        self,
        message: str,
        *,
        method: str | None = None,
        path: str | None = None,
        chat_id: str | None = None,
    ) -> None:
        super().__init__(message, chat_id=chat_id)
        self.method = method.upper() if method else None
        self.path = path

    def _state(self) -> dict[str, Any]:
        return {"method": self.method, "path": self.path, "chat_id": self.chat_id}


class CoderChatError(CoderAgentError):
    """The chat run failed: a stream ``error`` event or ``status: error`` (built from the
    wire ``ChatError``), or a client-side ``timeout``, ``stream_closed`` or
    ``queued_submission_lost`` (state machines C.4, E.2; D2, D22).

    ``withdrawn`` records the outcome of withdrawing a still-queued prompt (D9): ``True`` after
    a 204, ``False`` after a 404/409 (the prompt was already promoted), ``None`` otherwise.
    """

    def __init__(
        self,
        message: str,
        *,
        detail: str | None = None,
        kind: str | None = None,
        provider: str | None = None,
        retryable: bool = False,
        status_code: int | None = None,
        chat_id: str | None = None,
        withdrawn: bool | None = None,
    ) -> None:
        message = clip(message)
        detail = None if detail is None else clip(detail)
        full = f"{message}: {detail}" if detail else message
        super().__init__(full, chat_id=chat_id)
        self.server_message = message
        self.detail = detail
        self.kind = kind
        self.provider = provider
        self.retryable = retryable
        self.status_code = status_code
        self.withdrawn = withdrawn

    def _message_arg(self) -> str:
        return self.server_message

    def _state(self) -> dict[str, Any]:
        return {
            "detail": self.detail,
            "kind": self.kind,
            "provider": self.provider,
            "retryable": self.retryable,
            "status_code": self.status_code,
            "chat_id": self.chat_id,
            "withdrawn": self.withdrawn,
        }


class CoderStreamError(CoderAgentError):
    """The chat stream could not be kept alive: the redial budget ran out, or a drop happened
    while deltas without episode coordinates were outstanding (state machines C.2, C.5).

    ``retryable`` is true only when the failed turn created its chat and had no external
    effects (C.5); the agent's ``max_retries`` then replays the turn on a fresh chat.
    ``url`` is the stream URL (never with credentials).
    """

    def __init__(
        self,
        message: str,
        *,
        url: str | None = None,
        chat_id: str | None = None,
        retryable: bool = True,
        reason: str | None = None,
    ) -> None:
        super().__init__(message, chat_id=chat_id)
        self.url = url
        self.retryable = retryable
        self.reason = reason

    def _state(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "chat_id": self.chat_id,
            "retryable": self.retryable,
            "reason": self.reason,
        }
