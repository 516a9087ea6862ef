"""The served fake bounds what it reads: a body over its route's limit is answered 413 before it
is read (``Content-Length``) or as soon as it passes the limit (chunked), over real loopback
sockets. A client that never sends the body, or never ends it, still gets its answer."""

from __future__ import annotations

import json
import socket
from collections.abc import Iterator

import h11
import httpx
import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto.fake import MAX_REQUEST_BODY_BYTES, FakeCoderModel, FakeConfig

from .support import V2

UPLOAD_LIMIT = 10 * 1024 * 1024
CREATE_LIMIT = 256 * 1024
#: A hang guard for every socket read, far above any answer's time.
TIMEOUT = 20.0


@pytest.fixture(scope="module")
def server() -> Iterator[FakeCoderServer]:
    with FakeCoderServer(chunk_delay=0) as srv:
        yield srv


class Raw:
    """An HTTP/1.1 client on a plain socket that sends exactly what the test says (h11 for
    the framing, so a test can stop in the middle of a body)."""

    def __init__(self, server: FakeCoderServer) -> None:
        self.sock = socket.create_connection((server.host, server.port), timeout=TIMEOUT)
        self.conn = h11.Connection(h11.CLIENT)
        self.token = server.token

    def head(self, method: str, target: str, headers: dict[str, str]) -> None:
        fields = [("Host", "127.0.0.1"), ("Coder-Session-Token", self.token), *headers.items()]
        self.sock.sendall(
            self.conn.send(h11.Request(method=method, target=target, headers=fields)) or b""
        )

    def send(self, data: bytes) -> None:
        self.sock.sendall(self.conn.send(h11.Data(data=data)) or b"")

    def response(self) -> tuple[int, dict[str, str], bytes]:
        """The next final response (status, headers, body), skipping 100 Continue."""
        status = 0
        headers: dict[str, str] = {}
        body = b""
        while True:
            event = self.conn.next_event()
            if event is h11.NEED_DATA:
                self.conn.receive_data(self.sock.recv(65536))
            elif isinstance(event, h11.InformationalResponse):
                continue
            elif isinstance(event, h11.Response):
                status = event.status_code
                headers = {k.decode().lower(): v.decode() for k, v in event.headers}
            elif isinstance(event, h11.Data):
                body += event.data
            elif isinstance(event, h11.EndOfMessage):
                return status, headers, body
            else:  # pragma: no cover - a broken answer fails the test here
                raise AssertionError(event)

    def closed_by_server(self) -> bool:
        """Whether the server ended the connection (after what it sent)."""
        self.sock.settimeout(TIMEOUT)
        while True:
            try:
                data = self.sock.recv(65536)
            except ConnectionResetError:
                return True
            if not data:
                return True

    def close(self) -> None:
        self.sock.close()


def upload_target(server: FakeCoderServer) -> str:
    return f"{V2}/files?organization={server.organization_id}"


def last_record(server: FakeCoderServer) -> tuple[str, int]:
    record = server.counters.request_log[-1]
    return record.op, record.status


def test_an_oversized_content_length_is_answered_before_the_body_is_sent(
    server: FakeCoderServer,
) -> None:
    raw = Raw(server)
    try:
        raw.head(
            "POST",
            upload_target(server),
            {"Content-Type": "text/plain", "Content-Length": str(UPLOAD_LIMIT + 1)},
        )
        # Not a byte of the body is sent: the answer comes anyway.
        status, headers, body = raw.response()
        assert status == 413
        assert json.loads(body) == {
            "message": "File too large.",
            "detail": f"Maximum file size is {UPLOAD_LIMIT} bytes.",
        }
        assert headers["connection"] == "close"
        assert raw.closed_by_server()
    finally:
        raw.close()
    assert last_record(server) == ("upload_chat_file", 413)


@pytest.mark.parametrize(
    ("path", "limit"),
    [
        ("", CREATE_LIMIT),
        ("/00000000-0000-4000-8000-000000000000/messages", MAX_REQUEST_BODY_BYTES),
    ],
)
def test_json_routes_refuse_an_oversized_content_length_at_once(
    server: FakeCoderServer, path: str, limit: int
) -> None:
    raw = Raw(server)
    try:
        raw.head(
            "POST",
            V2 + path,
            {"Content-Type": "application/json", "Content-Length": str(limit + 1)},
        )
        status, _headers, body = raw.response()
        assert (status, json.loads(body)) == (413, {"message": "Request body too large."})
    finally:
        raw.close()


def test_an_endless_chunked_upload_is_answered_once_it_passes_the_limit(
    server: FakeCoderServer,
) -> None:
    raw = Raw(server)
    try:
        raw.head(
            "POST",
            upload_target(server),
            {"Content-Type": "text/plain", "Transfer-Encoding": "chunked"},
        )
        chunk = b"x" * 65_536
        for _ in range(UPLOAD_LIMIT // len(chunk)):
            raw.send(chunk)
        raw.send(b"x")  # one byte over, and the body never ends
        status, _headers, body = raw.response()
        assert status == 413
        assert json.loads(body)["message"] == "File too large."
        assert raw.closed_by_server()
    finally:
        raw.close()
    assert last_record(server) == ("upload_chat_file", 413)


def test_a_chunked_body_within_the_limit_is_read_whole(server: FakeCoderServer) -> None:
    raw = Raw(server)
    try:
        raw.head("POST", V2, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"})
        body = json.dumps(
            {
                "organization_id": server.organization_id,
                "content": [{"type": "text", "text": "y" * (CREATE_LIMIT - 200)}],
            }
        ).encode()
        for start in range(0, len(body), 1000):
            raw.send(body[start : start + 1000])
        raw.sock.sendall(raw.conn.send(h11.EndOfMessage()) or b"")
        status, _headers, answer = raw.response()
        assert status == 201, answer
    finally:
        raw.close()


def test_a_client_that_waits_for_100_continue_gets_it_for_an_acceptable_body(
    server: FakeCoderServer,
) -> None:
    raw = Raw(server)
    try:
        body = json.dumps(
            {"organization_id": server.organization_id, "content": [{"type": "text", "text": "hi"}]}
        ).encode()
        raw.head(
            "POST",
            V2,
            {
                "Content-Type": "application/json",
                "Content-Length": str(len(body)),
                "Expect": "100-continue",
            },
        )
        first = raw.conn.next_event()
        while first is h11.NEED_DATA:
            raw.conn.receive_data(raw.sock.recv(65536))
            first = raw.conn.next_event()
        assert isinstance(first, h11.InformationalResponse) and first.status_code == 100
        raw.send(body)
        raw.sock.sendall(raw.conn.send(h11.EndOfMessage()) or b"")
        status, _headers, _answer = raw.response()
        assert status == 201
    finally:
        raw.close()


def test_a_client_that_sends_the_whole_oversized_body_reads_the_413(
    server: FakeCoderServer,
) -> None:
    """httpx writes the whole body before it reads: the server reads none of it and closes,
    httpx's write fails and it reads the answer that was sent before the close."""
    with httpx.Client(base_url=server.url, headers={"Coder-Session-Token": server.token}) as http:
        response = http.post(
            upload_target(server),
            content=b"x" * (UPLOAD_LIMIT + 65_536),
            headers={
                "Content-Type": "text/plain",
                "Content-Disposition": 'attachment; filename="a.txt"',
            },
        )
    assert response.status_code == 413
    assert response.json()["message"] == "File too large."


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_refused_upload_is_closed_at_once_not_read_to_its_end(
    server: FakeCoderServer, framing: str
) -> None:
    """A sender that keeps writing after the 413 (a 1 GiB upload) finds the connection closed
    once the socket buffers between them are full: the server reads nothing of a declared
    gigabyte and at most 16 MiB more of a chunked body, where it used to read and drop
    whatever came for a second (hundreds of megabytes from a fast sender)."""
    raw = Raw(server)
    chunk = b"x" * 65_536
    try:
        if framing == "chunked":
            raw.head("POST", upload_target(server), {"Transfer-Encoding": "chunked"})
            for _ in range(UPLOAD_LIMIT // len(chunk) + 1):  # past the limit: answered
                raw.send(chunk)
        else:
            raw.head("POST", upload_target(server), {"Content-Length": str(1024**3)})
        sent = 0
        with pytest.raises(OSError):  # a reset or a broken pipe, once the buffers are full
            while sent < 1024**3:
                raw.sock.sendall(chunk)
                sent += len(chunk)
    finally:
        raw.close()
    # Besides what the server reads, loopback buffers hold a few MiB on both sides.
    assert sent < 48 * 1024 * 1024, f"{sent / 2**20:.0f} MiB went into a refused upload"
    assert last_record(server) == ("upload_chat_file", 413)


def test_the_limits_are_the_models() -> None:
    model = FakeCoderModel()
    files = "/api/v2/chats/files?organization=x"
    assert model.body_limit("POST", files) == UPLOAD_LIMIT
    assert model.body_limit("POST", "/api/v2/chats") == CREATE_LIMIT
    legacy = FakeCoderModel(FakeConfig(legacy_only=True))
    assert legacy.body_limit("POST", "/api/experimental/chats") == CREATE_LIMIT
    assert model.body_limit("POST", "/api/experimental/chats") == MAX_REQUEST_BODY_BYTES
    chat = "/api/v2/chats/00000000-0000-4000-8000-000000000000"
    assert model.body_limit("POST", chat + "/tool-results") == CREATE_LIMIT
    assert model.body_limit("PATCH", chat) == MAX_REQUEST_BODY_BYTES
    assert model.body_limit("PUT", "/nowhere") == MAX_REQUEST_BODY_BYTES
    refused = model.refuse_body("POST", files + "&coder_session_token=secret", now=1.0)
    assert refused.status == 413 and refused.json()["message"] == "File too large."
    record = model.counters.request_log[-1]
    assert (record.op, record.status) == ("upload_chat_file", 413)
    assert "secret" not in record.path


def test_a_read_body_over_the_limit_is_refused_by_the_model_too() -> None:
    """A body that reached the model whole (an adapter of its own) gets the same answer."""
    model = FakeCoderModel()
    headers = {"Coder-Session-Token": model.token, "Content-Type": "application/json"}
    big = b'{"content": "' + b"x" * MAX_REQUEST_BODY_BYTES + b'"}'
    chat = "/api/v2/chats/00000000-0000-4000-8000-000000000000"
    response = model.handle_http("PATCH", chat, headers, big, now=0.0)
    assert (response.status, response.json()) == (413, {"message": "Request body too large."})
