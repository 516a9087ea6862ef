"""Test helpers for the fake server: a pure-model client with a manual clock, and a raw
wsproto client core shared by the blocking, asyncio and trio socket tests.

Every frame a test receives is also parsed with the client's own parser
(``coder_proto._wire.parse_frame``), so the fake's wire format is checked against what the
library accepts as well as against the spec.
"""

from __future__ import annotations

import json
from typing import Any

from wsproto import ConnectionType, WSConnection
from wsproto.connection import ConnectionState
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    CloseConnection,
    Ping,
    RejectConnection,
    RejectData,
    Request,
    TextMessage,
)

from coder_proto._wire import parse_frame, parse_watch_frame
from coder_proto.fake import (
    FakeCoderModel,
    FakeConfig,
    FakeHttpResponse,
    Script,
    StreamSubscription,
    WatchSubscription,
)

V2 = "/api/v2/chats"
LEGACY = "/api/experimental/chats"
TERMINAL = {"waiting", "error", "requires_action"}

WEATHER_TOOL = {
    "name": "get_weather",
    "description": "Get the weather for a city.",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


def text_content(text: str) -> list[dict[str, str]]:
    return [{"type": "text", "text": text}]


class Api:
    """Drive a pure ``FakeCoderModel`` through ``handle_http`` with a manual clock."""

    def __init__(self, model: FakeCoderModel | None = None, *, prefix: str = V2, **config: Any):
        self.model = model if model is not None else FakeCoderModel(FakeConfig(**config))
        self.prefix = prefix
        self.now = 0.0

    @property
    def headers(self) -> dict[str, str]:
        return {"Coder-Session-Token": self.model.token}

    def advance(self, seconds: float = 1.0) -> None:
        self.now += seconds
        self.model.tick(self.now)

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        *,
        raw: bytes | None = None,
        headers: dict[str, str] | None = None,
        absolute: bool = False,
    ) -> FakeHttpResponse:
        data = raw if raw is not None else (b"" if body is None else json.dumps(body).encode())
        target = path if absolute else self.prefix + path
        hdrs = dict(self.headers)
        if headers is not None:
            hdrs.update(headers)
        return self.model.handle_http(method, target, hdrs, data, self.now)

    # -- operations ---------------------------------------------------------------------------

    def create(self, text: str = "hello", *, script: Script | None = None, **fields: Any) -> str:
        if script is not None:
            self.model.config.scripts.push(script)
        body = {"organization_id": self.model.organization_id, "content": text_content(text)}
        body.update(fields)
        response = self.request("POST", "", body)
        assert response.status == 201, response.json()
        return str(response.json()["id"])

    def send(
        self, chat_id: str, text: str, *, busy: str | None = None, script: Script | None = None
    ) -> FakeHttpResponse:
        if script is not None:
            self.model.config.scripts.push(script)
        body: dict[str, Any] = {"content": text_content(text)}
        if busy is not None:
            body["busy_behavior"] = busy
        return self.request("POST", f"/{chat_id}/messages", body)

    def interrupt(self, chat_id: str) -> FakeHttpResponse:
        return self.request("POST", f"/{chat_id}/interrupt")

    def results(self, chat_id: str, results: list[dict[str, Any]]) -> FakeHttpResponse:
        return self.request("POST", f"/{chat_id}/tool-results", {"results": results})

    def archive(self, chat_id: str, archived: bool = True) -> FakeHttpResponse:
        return self.request("PATCH", f"/{chat_id}", {"archived": archived})

    def status(self, chat_id: str) -> str:
        return self.model.chats[chat_id].status

    def chat(self, chat_id: str) -> dict[str, Any]:
        response = self.request("GET", f"/{chat_id}")
        assert response.status == 200
        return dict(response.json())

    def messages(self, chat_id: str, query: str = "") -> dict[str, Any]:
        response = self.request("GET", f"/{chat_id}/messages{query}")
        assert response.status == 200, response.json()
        return dict(response.json())

    def pending_ids(self, chat_id: str) -> list[str]:
        return [str(c["tool_call_id"]) for c in self.model.chats[chat_id].pending_tool_calls()]

    def run_until(self, chat_id: str, statuses: set[str], limit: float = 60.0) -> None:
        """Advance the clock in small steps until the chat's status is in ``statuses``."""
        start = self.now
        while self.status(chat_id) not in statuses:
            assert self.now - start < limit, f"stuck in {self.status(chat_id)}"
            deadline = self.model.next_deadline()
            self.now = max(self.now, deadline if deadline is not None else self.now + 1.0)
            self.model.tick(self.now)

    def stream(self, chat_id: str, after_id: int | None = None) -> Stream:
        target = f"{self.prefix}/{chat_id}/stream"
        if after_id is not None:
            target += f"?after_id={after_id}"
        sub = self.model.handle_upgrade(target, self.headers, self.now)
        assert isinstance(sub, StreamSubscription), sub
        return Stream(self, sub)

    def watch(self) -> Watch:
        sub = self.model.handle_upgrade(f"{self.prefix}/watch", self.headers, self.now)
        assert isinstance(sub, WatchSubscription), sub
        return Watch(self, sub)


def check_frame(frame: bytes) -> list[dict[str, Any]]:
    """A stream frame: a JSON array of at most 256 events plus a trailing newline
    (server-behaviour 3.1, 8.11), which the client's parser accepts."""
    assert frame.endswith(b"\n")
    assert not frame[:-1].endswith(b"\n")
    events = json.loads(frame)
    assert isinstance(events, list)
    assert 1 <= len(events) <= 256
    parsed = parse_frame(frame)
    assert len(parsed) == len(events)
    for event in events:
        assert isinstance(event["chat_id"], str) and event["chat_id"]
    return events


class Stream:
    """A pure stream subscription with parsed output."""

    def __init__(self, api: Api, sub: StreamSubscription):
        self.api = api
        self.sub = sub
        self.frames: list[list[dict[str, Any]]] = []
        self.events: list[dict[str, Any]] = []

    def pull(self) -> list[dict[str, Any]]:
        """The events released at the API's current time (every frame checked)."""
        out: list[dict[str, Any]] = []
        for frame in self.sub.pull(self.api.now):
            events = check_frame(frame)
            self.frames.append(events)
            out.extend(events)
        self.events.extend(out)
        return out

    def pull_until_status(self, statuses: set[str], limit: float = 60.0) -> list[dict[str, Any]]:
        """Advance time event by event (pulling after each) until a status in ``statuses``
        arrives; returns everything pulled."""
        out = self.pull()
        start = self.api.now
        while not any(e["type"] == "status" and e["status"]["status"] in statuses for e in out):
            assert self.api.now - start < limit, "no terminal status"
            deadline = self.api.model.next_deadline()
            sub_deadline = self.sub.next_deadline()
            candidates = [d for d in (deadline, sub_deadline) if d is not None]
            self.api.now = max(self.api.now, min(candidates) if candidates else self.api.now + 1)
            out += self.pull()
        return out


class Watch:
    def __init__(self, api: Api, sub: WatchSubscription):
        self.api = api
        self.sub = sub

    def pull(self) -> list[dict[str, Any]]:
        out = []
        for frame in self.sub.pull(self.api.now):
            assert frame.endswith(b"\n")
            event = json.loads(frame)
            assert isinstance(event, dict), "watch frames are single objects"
            assert len(parse_watch_frame(frame)) == 1
            out.append(event)
        return out


def types(events: list[dict[str, Any]]) -> list[str]:
    """Event types, with the status value for status events (``status:running``)."""
    return [
        f"status:{e['status']['status']}" if e["type"] == "status" else e["type"] for e in events
    ]


def statuses(events: list[dict[str, Any]]) -> list[str]:
    return [e["status"]["status"] for e in events if e["type"] == "status"]


def messages_of(events: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e["message"] for e in events if e["type"] == "message"]


def text_of(message: dict[str, Any]) -> str:
    return "".join(p["text"] for p in message.get("content", []) if p["type"] == "text")


def delta_text(events: list[dict[str, Any]]) -> str:
    return "".join(
        e["message_part"]["part"]["text"]
        for e in events
        if e["type"] == "message_part" and e["message_part"]["part"]["type"] == "text"
    )


# -- a sans-I/O WebSocket client core -------------------------------------------------------------


class RawWs:
    """The client side of one WebSocket, over wsproto, without I/O: feed it received bytes,
    send what ``data_to_send`` returns. Records the upgrade outcome, text frames, the server's
    close code (``None`` when the connection simply ended) and pings."""

    def __init__(
        self,
        target: str,
        headers: dict[str, str],
        host: str = "127.0.0.1",
        *,
        answer_pings: bool = True,
    ) -> None:
        self.answer_pings = answer_pings
        self.ws = WSConnection(ConnectionType.CLIENT)
        self._out = self.ws.send(
            Request(host=host, target=target, extra_headers=list(headers.items()))
        )
        self.accepted: bool | None = None
        self.reject_status: int | None = None
        self.reject_body = b""
        self.frames: list[bytes] = []
        self._partial = ""
        self.close_code: int | None = None
        self.close_reason: str | None = None
        self.eof = False
        self.pings = 0

    def data_to_send(self) -> bytes:
        out, self._out = self._out, b""
        return out

    def send_text(self, text: str) -> None:
        self._out += self.ws.send(TextMessage(data=text))

    def close(self, code: int = 1000) -> None:
        if self.ws.state is ConnectionState.OPEN:
            self._out += self.ws.send(CloseConnection(code=code))

    @property
    def finished(self) -> bool:
        return self.eof or self.close_code is not None or self.accepted is False

    def feed(self, data: bytes) -> None:
        if not data:
            self.eof = True
            if self.accepted is None:
                self.accepted = False
            return
        self.ws.receive_data(data)
        for event in self.ws.events():
            if isinstance(event, AcceptConnection):
                self.accepted = True
            elif isinstance(event, RejectConnection):
                self.accepted = False
                self.reject_status = event.status_code
            elif isinstance(event, RejectData):
                self.reject_body += event.data
            elif isinstance(event, TextMessage):
                self._partial += event.data
                if event.message_finished:
                    self.frames.append(self._partial.encode())
                    self._partial = ""
            elif isinstance(event, BytesMessage):  # pragma: no cover - the server sends text
                raise AssertionError("binary frame from the server")
            elif isinstance(event, Ping):
                self.pings += 1
                if self.answer_pings and self.ws.state is ConnectionState.OPEN:
                    self._out += self.ws.send(event.response())
            elif isinstance(event, CloseConnection):
                self.close_code = event.code
                self.close_reason = event.reason
                if self.ws.state is ConnectionState.REMOTE_CLOSING:
                    self._out += self.ws.send(event.response())

    def events(self) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for frame in self.frames:
            out.extend(check_frame(frame))
        return out

    def watch_events(self) -> list[dict[str, Any]]:
        out = []
        for frame in self.frames:
            assert frame.endswith(b"\n")
            event = json.loads(frame)
            assert isinstance(event, dict)
            assert len(parse_watch_frame(frame)) == 1
            out.append(event)
        return out

    def saw_status(self, wanted: set[str]) -> bool:
        return any(s in wanted for s in statuses(self.events()))
