"""The ``Recorder`` protocol: what a ``Connection`` reports to a transcript's recorder (one
call per REST exchange, per stream connection's events, per tool run...). It sits below the
connection, so the connection names it without reaching into ``coder_proto.transcript``,
whose ``TranscriptRecorder`` implements it and whose replay drives a ``Connection``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from ._actions import OpenConnection, ToolOutcome
from ._outputs import ToolCall
from ._rest.http import HttpRequest, HttpResponse
from ._stream.websocket import WsEvent
from ._wire.chats import DynamicTool

__all__ = ["Recorder"]


class Recorder(Protocol):
    """What an adapter tells a recorder (every call carries the ``now`` it fed the machine).

    The adapter calls ``begin`` once before anything else, then one method per observation:
    a turn starting or ending, each REST exchange (once its outcome is known, or when it is
    cancelled), each stream connection opened, the request target of its upgrade, the
    events its reader decoded from the bytes received (the core's own reading: the upgrade
    accepted or rejected, each text message, the close frame, a protocol failure), its
    ending, each tool run, a cancellation, a session call. A recorder never raises into the
    adapter.
    """

    def begin(self, *, base_url: str, config: Any, created_at: str, now: float) -> None: ...

    def turn_started(
        self,
        *,
        mode: str,
        prompt: object,
        now: float,
        tools: Sequence[DynamicTool] | None = None,
        warnings: Sequence[str] = (),
        single_segment: bool = False,
    ) -> None: ...

    def turn_finished(self, outcome: object, now: float) -> None: ...

    def rest_exchange(
        self,
        request: HttpRequest,
        response: HttpResponse | None,
        *,
        sent: float,
        now: float,
        error: str | None = None,
    ) -> None: ...

    def connection_opened(self, action: OpenConnection, now: float) -> None: ...

    def upgrade_sent(self, conn_id: int, target: str, now: float) -> None: ...

    def ws_events(self, conn_id: int, events: Sequence[WsEvent], now: float) -> None: ...

    def connection_lost(self, conn_id: int, now: float) -> None: ...

    def connection_failed(self, conn_id: int, message: str, now: float) -> None: ...

    def connection_closed(self, conn_id: int, now: float) -> None: ...

    def tools_run(
        self,
        calls: Sequence[ToolCall],
        outcomes: Sequence[ToolOutcome],
        *,
        sent: float,
        now: float,
    ) -> None: ...

    def cancelled(self, reason: BaseException | None, now: float) -> None: ...

    def session_call(
        self, name: str, now: float, *, wait: bool = False, timeout: float | None = None
    ) -> None: ...
