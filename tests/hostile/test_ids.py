"""A server that answers a chat's creation with an id that is not one, on every runtime.

The id is refused where the answer is parsed (wire 3.9): the call fails at once with
``CoderProtocolError`` and no request follows, so none goes to a path built from the id
(before, a lone surrogate was repaired into ``ab\\ufffdcd`` and the stream, interrupt and
archive requests went to ``/chats/ab%EF%BF%BDcd``; a line break or ``../`` waited for the
whole request timeout, every event of the real chat being another chat's, D31).
"""

from __future__ import annotations

import json

import pytest

from coder_proto import CoderProtocolError

from .runtimes import TOKEN, call, generate, open_sockets
from .server import Conn, HostileServer, response
from .test_rest import _chain
from .ws_cases import ORG, _invalid_chat_id, serve

#: The ``id`` of the create answer, as JSON text: a lone surrogate, a line break with a header
#: after it, a relative path.
BAD_IDS = {
    "lone-surrogate": b'"ab\\ud800cd"',
    "crlf": b'"c1\\r\\nX-Injected: 1"',
    "dot-dot-slash": b'"../../users/me"',
}

#: Long enough that a client waiting for the stream would be seen to wait.
REQUEST_TIMEOUT = 30.0


class Recorder:
    """Answers a chat's creation (on either prefix, wire 1.2) with a chat whose id is
    ``chat_id`` and records every request line it is sent; any other request is answered
    404."""

    def __init__(self, chat_id: bytes) -> None:
        self.body = (
            b'{"id":'
            + chat_id
            + b',"organization_id":"'
            + ORG.encode()
            + b'","owner_id":"'
            + ORG.encode()
            + b'","title":"x","status":"running","archived":false,'
            b'"created_at":"2026-01-01T00:00:00Z","updated_at":"2026-01-01T00:00:00Z"}'
        )
        self.lines: list[str] = []

    def __call__(self, conn: Conn) -> None:
        while True:
            head, _body = conn.read_request()
            if not head:
                return
            line = head.split(b"\r\n", 1)[0].decode("latin-1")
            self.lines.append(line)
            if line.startswith("POST ") and line.split(" ")[1].endswith("/chats"):
                conn.send(response(201, self.body))
            else:
                conn.send(response(404, json.dumps({"message": "no such route"}).encode()))


def _check(error: BaseException | None, recorder: Recorder) -> None:
    assert isinstance(error, CoderProtocolError), repr(error)
    assert "'id' is not a valid identifier" in str(error)
    for item in _chain(error):
        assert TOKEN not in str(item)
    # The creation was the only request: nothing was built from the id.
    [line] = recorder.lines
    assert line.startswith("POST /api/") and line.endswith("/chats HTTP/1.1"), line


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bad", sorted(BAD_IDS))
def test_a_created_chat_with_an_invalid_id_fails_the_call_at_once(runtime: str, bad: str) -> None:
    sockets = open_sockets()
    recorder = Recorder(BAD_IDS[bad])
    with HostileServer(recorder) as server:
        out = call(
            runtime,
            server.url,
            "create_chat",
            options={"organization_id": ORG, "content": "hello"},
        )
    _check(out.error, recorder)
    assert not out.threads_left, out.threads_left
    assert open_sockets() <= sockets, "a socket outlived close"


@pytest.mark.timeout(60)
@pytest.mark.parametrize("bad", sorted(BAD_IDS))
def test_a_turn_whose_chat_comes_back_with_an_invalid_id_fails_at_once(
    runtime: str, bad: str
) -> None:
    """The agent streams, interrupts and archives nothing: it has no chat id to use."""
    sockets = open_sockets()
    recorder = Recorder(BAD_IDS[bad])
    with HostileServer(recorder) as server:
        out = generate(
            runtime,
            server.url,
            "hello",
            agent={"organization_id": ORG, "request_timeout": REQUEST_TIMEOUT},
        )
    _check(out.error, recorder)
    # Failing at once is seen in what was sent (no stream was dialled); the bound only
    # catches a client that waited for its whole request timeout.
    assert out.elapsed < REQUEST_TIMEOUT, f"the turn took {out.elapsed:.1f} s"
    assert not out.threads_left, out.threads_left
    assert open_sockets() <= sockets, "a socket outlived close"


@pytest.mark.timeout(60)
def test_a_stream_event_naming_an_invalid_chat_ends_the_turn_at_once(runtime: str) -> None:
    """The frame is refused (wire 3.9), not dropped as another chat's event (D31) while the
    turn waits for its own: the turn ends with the parse failure, without a redial."""
    with HostileServer(serve(_invalid_chat_id)) as server:
        out = generate(
            runtime,
            server.url,
            "hello",
            agent={"organization_id": ORG, "request_timeout": REQUEST_TIMEOUT},
        )
    assert out.error is not None, f"the turn answered {out.value!r}"
    chain = _chain(out.error)
    assert any(
        isinstance(e, CoderProtocolError) and "'chat_id' is not a valid identifier" in str(e)
        for e in chain
    ), [repr(e) for e in chain]
    assert server.upgrades == 1
    assert out.elapsed < REQUEST_TIMEOUT, f"the turn took {out.elapsed:.1f} s"
