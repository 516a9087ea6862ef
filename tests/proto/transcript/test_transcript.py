"""The transcript format: records, the strict reader, the recorder, and secrets staying out
(docs/architecture.md rule 6; docs/transcripts.md)."""

from __future__ import annotations

import json
import logging

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wsproto import ConnectionType, WSConnection
from wsproto.events import (
    AcceptConnection,
    BytesMessage,
    Message,
    Ping,
    RejectConnection,
    RejectData,
    TextMessage,
)
from wsproto.events import CloseConnection as WsCloseConnection

from coder_proto import (
    AssistantMessage,
    CoderAgentError,
    CoderApiError,
    CoderChatError,
    CoderStreamError,
    DynamicTool,
    FileContent,
    FileReferenceInput,
    SystemMessage,
    TextContent,
    ToolCall,
    ToolMessage,
    ToolResultContent,
    UserMessage,
)
from coder_proto._actions import OpenConnection, ToolOutcome
from coder_proto._agent.session_state import SessionConfig
from coder_proto._rest.http import HttpRequest, HttpResponse
from coder_proto._stream.websocket import MAX_REJECTION_BODY, WebSocketClient, WsText
from coder_proto.transcript._encoding import prompt_from_json, prompt_to_json, redact_url
from coder_proto.transcript._fields import TranscriptError, TranscriptVersionError
from coder_proto.transcript._format import Transcript, parse_transcript
from coder_proto.transcript._outcomes import outcome_summary
from coder_proto.transcript._recorder import TranscriptRecorder
from coder_proto.transcript._records import (
    FORMAT_NAME,
    FORMAT_VERSION,
    Cancel,
    Header,
    RestExchange,
    SessionCall,
    ToolRunRecord,
    TranscriptSettings,
    TurnEnd,
    TurnStarted,
    WsAccept,
    WsClose,
    WsEnd,
    WsError,
    WsFrame,
    WsOpenRecord,
    WsReject,
)
from fuzz.seeds import SCENARIOS, record

TOKEN = "tok-SECRET-123"
WEATHER = DynamicTool(name="get_weather", input_schema={"type": "object"}, description="w")


def _header(**settings: object) -> str:
    return json.dumps({"kind": "header", "format": FORMAT_NAME, "version": 1, "settings": settings})


def _every_record() -> list[object]:
    call = ToolCall(tool_call_id="c1", tool_name="get_weather", input='{"city":"Paris"}')
    return [
        TurnStarted(
            t=0.0,
            mode="stream",
            prompt=(UserMessage((TextContent("hi"),)),),
            tools=(WEATHER,),
            warnings=("w",),
            single_segment=True,
        ),
        RestExchange(
            t=0.5,
            sent=0.1,
            op="create_chat",
            method="POST",
            path="/api/v2/chats",
            request={"a": 1},
            status=201,
            response={"id": "c"},
            content_type="application/json",
        ),
        RestExchange(
            t=1, sent=1, op="get_chat_file", method="GET", path="/f", status=200, response_bytes=3
        ),
        RestExchange(
            t=1, sent=1, op="x", method="GET", path="/t", status=502, response_text="bad gateway"
        ),
        RestExchange(
            t=1, sent=1, op="x", method="POST", path="/u", request_bytes=9, error="refused"
        ),
        RestExchange(t=1, sent=1, op="x", method="GET", path="/h", cancelled=True),
        WsOpenRecord(t=1, conn=1, url="ws://h/api/v2/chats/c/stream?after_id=3"),
        WsOpenRecord(t=1, conn=2),
        WsAccept(t=1, conn=1),
        WsFrame(t=1.25, conn=1, text='[{"type":"status"}]\n'),
        WsClose(t=2, conn=1, code=1001, reason="going away"),
        WsReject(t=2, conn=2, status=404, body='{"message":"nope"}'),
        WsReject(t=2, conn=2, status=502, body_bytes=4),
        WsError(t=2, conn=2, message="bad frame"),
        WsEnd(t=2, conn=1, how="lost"),
        WsEnd(t=2, conn=2, how="failed", message="reset"),
        WsEnd(t=2, conn=3, how="closed"),
        ToolRunRecord(
            t=3,
            sent=2.5,
            calls=(call,),
            outcomes=(ToolOutcome(tool_call_id="c1", output={"t": 21}, is_error=False),),
        ),
        Cancel(t=4, reason="CancelledError"),
        SessionCall(t=5, name="interrupt", wait=True, timeout=3.0),
        SessionCall(t=5, name="reset_session"),
        TurnEnd(t=6, outcome={"text": "x"}),
    ]


def test_every_record_round_trips_through_the_jsonl_text() -> None:
    """A written transcript reads back as the same header and records, in order."""
    settings_ = TranscriptSettings(
        organization_id="org",
        model="m",
        instructions="be nice",
        tools=(WEATHER,),
        mcp_server_ids=("a",),
        request_timeout=2.5,
        max_steps=3,
        chat_id="c",
        last_seen_message_id=7,
    )
    header = Header(
        created_at="2026-01-01T00:00:00Z", base_url="https://coder.test", settings=settings_
    )
    transcript = Transcript(header=header, records=tuple(_every_record()))  # type: ignore[arg-type]
    text = transcript.dumps()
    assert all(json.loads(line) for line in text.splitlines())
    again = parse_transcript(text)
    assert again.header == header
    assert again.records == transcript.records
    assert parse_transcript(text.encode()).records == transcript.records
    assert parse_transcript(text.splitlines()).records == transcript.records
    assert again.of(WsFrame) == [r for r in transcript.records if isinstance(r, WsFrame)]


def test_the_header_names_the_format_version_and_library() -> None:
    line = json.loads(Transcript(header=Header()).lines()[0])
    assert line["kind"] == "header"
    assert line["format"] == FORMAT_NAME
    assert line["version"] == FORMAT_VERSION
    assert line["library_version"]


def test_a_newer_format_version_is_refused_with_a_clear_error() -> None:
    text = json.dumps({"kind": "header", "format": FORMAT_NAME, "version": FORMAT_VERSION + 1})
    with pytest.raises(TranscriptVersionError, match="newer") as info:
        parse_transcript(text)
    assert isinstance(info.value, CoderAgentError)
    assert info.value.line == 1


@pytest.mark.parametrize(
    ("lines", "match", "line"),
    [
        ([], "empty transcript", None),
        (["not json"], "not JSON", 1),
        (['{"kind":"turn"}'], "first line must be the transcript header", 1),
        (['{"kind":"header","format":"other","version":1}'], "not a transcript", 1),
        (['{"kind":"header","format":"coder-agents-transcript","version":0}'], "version", 1),
        (['{"kind":"header","format":"coder-agents-transcript","version":"1"}'], "version", 1),
        ([_header(), "[1]"], "must be a JSON object", 2),
        ([_header(), '{"kind":"mystery","t":0}'], "unknown record kind", 2),
        ([_header(), '{"kind":"ws_frame","t":0,"conn":1}'], "'text'", 2),
        ([_header(), '{"kind":"ws_frame","t":-1,"conn":1,"text":""}'], "'t'", 2),
        ([_header(), '{"kind":"ws_frame","t":0,"conn":0,"text":""}'], "'conn'", 2),
        ([_header(), '{"kind":"ws_frame","t":true,"conn":1,"text":""}'], "'t'", 2),
        ([_header(), '{"kind":"ws_end","t":0,"conn":1,"how":"vanished"}'], "'how'", 2),
        ([_header(), '{"kind":"ws_close","t":0,"conn":1,"code":7}'], "'code'", 2),
        ([_header(), '{"kind":"ws_reject","t":0,"conn":1,"status":101}'], "'status'", 2),
        ([_header(), '{"kind":"rest","t":0,"op":"a","method":"GET","path":"/"}'], "exactly one", 2),
        (
            [_header(), '{"kind":"rest","t":0,"op":"a","method":"GET","path":"/","status":999}'],
            "'status'",
            2,
        ),
        ([_header(), '{"kind":"turn","t":0,"mode":"chat","prompt":[]}'], "'mode'", 2),
        ([_header(), '{"kind":"turn","t":0,"mode":"stream","prompt":{}}'], "'prompt'", 2),
        (
            [
                _header(),
                '{"kind":"turn","t":0,"mode":"stream","prompt":[{"role":"user","content":[{"type":"file"}]}]}',
            ],
            "file",
            2,
        ),
        (
            [
                _header(),
                '{"kind":"turn","t":0,"mode":"stream","prompt":[{"role":"user","content":[{"type":"file","data_b64":"!!"}]}]}',
            ],
            "data_b64",
            2,
        ),
        ([_header(), '{"kind":"tools","t":0,"calls":[{}],"outcomes":[]}'], "tool_call_id", 2),
        ([_header(), '{"kind":"call","t":0,"name":"explode"}'], "'name'", 2),
        ([_header(), '{"kind":"turn_end","t":0,"outcome":[]}'], "'outcome'", 2),
        ([_header(tools=[{"description": "x"}])], "'name'", 1),
        ([_header(mcp_server_ids=[1])], "mcp_server_ids", 1),
        ([_header(request_timeout="1")], "request_timeout", 1),
        ([_header(max_steps=1.5)], "max_steps", 1),
        ([_header(), '{"kind":"ws_frame","t":1e400,"conn":1,"text":""}'], "'t'", 2),
    ],
)
def test_malformed_transcripts_raise_transcript_errors_with_the_line(
    lines: list[str], match: str, line: int | None
) -> None:
    """A strict reader: every problem is a ``TranscriptError`` naming the line, never a
    ``KeyError``/``TypeError``/``JSONDecodeError``."""
    with pytest.raises(TranscriptError, match=match) as info:
        parse_transcript("\n".join(lines))
    assert info.value.line == line


def test_non_utf8_bytes_are_a_transcript_error() -> None:
    with pytest.raises(TranscriptError, match="UTF-8"):
        parse_transcript(b"\xff\xfe")


def test_blank_lines_are_allowed_and_unknown_fields_ignored() -> None:
    text = _header() + '\n\n{"kind":"ws_accept","t":0,"conn":1,"extra":true}\n'
    assert parse_transcript(text).records == (WsAccept(t=0.0, conn=1),)


def test_transcript_errors_pickle() -> None:
    import pickle

    error = TranscriptError("bad", line=3)
    again = pickle.loads(pickle.dumps(error))
    assert str(again) == str(error)


# -- prompts ---------------------------------------------------------------------------------


def test_prompts_of_every_message_kind_round_trip() -> None:
    prompt = [
        SystemMessage("system text"),
        UserMessage(
            (
                TextContent("look"),
                FileContent(data=b"\x89PNG", media_type="image/png", filename="a.png"),
                FileContent(file_id="f-1"),
                FileReferenceInput(file_name="a.py", start_line=1, end_line=2, content="x"),
            )
        ),
        AssistantMessage(({"type": "text", "text": "earlier"},)),
        ToolMessage(
            (ToolResultContent(tool_call_id="c", output={"ok": 1}, is_error=True, tool_name="t"),)
        ),
    ]
    assert prompt_from_json(prompt_to_json(prompt)) == tuple(prompt)
    assert prompt_from_json(prompt_to_json("hi")) == (UserMessage((TextContent("hi"),)),)


def test_a_prompt_with_values_that_are_not_json_is_still_recorded() -> None:
    prompt = [
        AssistantMessage((object(),)),
        ToolMessage((ToolResultContent(tool_call_id="c", output=float("nan")),)),
    ]
    data = prompt_to_json(prompt)
    json.dumps(data, allow_nan=False)
    assert isinstance(data[1]["content"][0]["output"], str)


# -- URLs and secrets ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("url", "expected"),
    [
        (
            "https://user:pw@coder.test/x?coder_session_token=abc&after_id=3#frag",
            "https://coder.test/x?after_id=3",
        ),
        ("ws://h:8080/api/v2/chats/c/stream?TOKEN=1", "ws://h:8080/api/v2/chats/c/stream"),
        ("http://[::1]:99/", "http://[::1]:99/"),
        ("http://h:notaport/", "<unparseable URL>"),
    ],
)
def test_urls_are_recorded_without_credentials(url: str, expected: str) -> None:
    assert redact_url(url) == expected


def test_no_record_type_has_a_field_that_could_hold_headers_or_a_token() -> None:
    """docs/architecture.md rule 6: the record types cannot carry the token."""
    types = [Header, TranscriptSettings, *{type(r) for r in _every_record()}]
    for cls in types:
        for field in attrs.fields(cls):
            assert "header" not in field.name.lower(), (cls, field.name)
            assert "token" not in field.name.lower(), (cls, field.name)
            assert "auth" not in field.name.lower(), (cls, field.name)


def test_the_header_drops_credentials_of_the_base_url_and_never_records_the_token() -> None:
    lines: list[str] = []
    recorder = TranscriptRecorder(lines.append)
    config = SessionConfig(
        base_url="https://u:p@coder.test/?coder_session_token=" + TOKEN, token=TOKEN
    )
    recorder.begin(base_url=config.base_url, config=config, created_at="now", now=10.0)
    header = json.loads(lines[0])
    assert header["base_url"] == "https://coder.test/"
    assert TOKEN not in "".join(lines)


def _server_reply(request: bytes, *events: object) -> bytes:
    server = WSConnection(ConnectionType.SERVER)
    server.receive_data(request)
    list(server.events())
    out = b""
    for event in events:
        out += server.send(event)  # type: ignore[arg-type]
    return out


def _upgrade(
    token: str = TOKEN, target: str = "/api/v2/chats/c/stream?after_id=4"
) -> tuple[bytes, WebSocketClient]:
    client = WebSocketClient("ws://coder.test:3000" + target, token=token)
    return client.initiate(), client


def _received(
    recorder: TranscriptRecorder,
    conn: int,
    client: WebSocketClient,
    data: bytes | None,
    now: float,
) -> None:
    """What a stream reader does with bytes it read (``None``: the end of stream): the
    connection decodes them and the recorder hears the events it decoded."""
    events = client.receive_data(data)
    if events:
        recorder.ws_events(conn, events, now)


def test_the_recorder_keeps_only_the_request_target_of_the_upgrade() -> None:
    """The upgrade request carries ``Coder-Session-Token``; the transcript keeps the URL."""
    lines: list[str] = []
    recorder = TranscriptRecorder(lines.append)
    recorder.begin(base_url="http://coder.test:3000", config=None, created_at="", now=0.0)
    recorder.connection_opened(
        OpenConnection(conn_id=1, host="coder.test", port=3000, tls=False), 0.0
    )
    target = "/api/v2/chats/c/stream?after_id=4&coder_session_token=" + TOKEN
    request, client = _upgrade(target=target)
    assert TOKEN.encode() in request
    recorder.upgrade_sent(1, client.target, 0.1)
    recorder.upgrade_sent(1, "/later", 0.2)  # only the first upgrade is recorded
    text = "".join(lines)
    assert TOKEN not in text
    records = parse_transcript(text).records
    assert records == (
        WsOpenRecord(t=0.1, conn=1, url="ws://coder.test:3000/api/v2/chats/c/stream?after_id=4"),
    )


def test_the_recorder_records_the_frames_and_close_the_connection_decoded() -> None:
    """Pings and binary messages decode to no event; fragments to one message."""
    lines: list[str] = []
    recorder = TranscriptRecorder(lines.append)
    recorder.begin(base_url="https://h", config=None, created_at="", now=5.0)
    recorder.connection_opened(OpenConnection(conn_id=3, host="::1", port=443, tls=True), 5.0)
    request, client = _upgrade()
    recorder.upgrade_sent(3, "not a path", 5.0)
    data = _server_reply(
        request,
        AcceptConnection(),
        TextMessage(data="[1]\n"),
        Message(data="frag", message_finished=False),
        Ping(payload=b"p"),
        Message(data="ment", message_finished=True),
        BytesMessage(data=b"\x00"),
        TextMessage(data="héllo ✓"),
        WsCloseConnection(code=1001, reason="bye"),
    )
    for i in range(0, len(data), 7):
        _received(recorder, 3, client, data[i : i + 7], 6.0)
    recorder.connection_lost(3, 7.0)
    recorder.connection_lost(3, 8.0)  # ignored: already ended
    records = parse_transcript("".join(lines)).records
    assert records == (
        WsOpenRecord(t=0.0, conn=3, url=None),
        WsAccept(t=1.0, conn=3),
        WsFrame(t=1.0, conn=3, text="[1]\n"),
        WsFrame(t=1.0, conn=3, text="fragment"),
        WsFrame(t=1.0, conn=3, text="héllo ✓"),
        WsClose(t=1.0, conn=3, code=1001, reason="bye"),
        WsEnd(t=2.0, conn=3, how="lost"),
    )


def test_the_recorder_ignores_events_of_a_connection_it_does_not_know_or_that_ended() -> None:
    lines: list[str] = []
    recorder = TranscriptRecorder(lines.append)
    recorder.begin(base_url="http://h", config=None, created_at="", now=0.0)
    recorder.ws_events(9, [WsText("x")], 0.0)
    recorder.upgrade_sent(9, "/x", 0.0)
    recorder.connection_opened(OpenConnection(conn_id=1, host="h", port=80, tls=False), 0.0)
    recorder.connection_closed(1, 0.1)
    recorder.ws_events(1, [WsText("late")], 0.2)
    recorder.upgrade_sent(1, "/late", 0.2)
    records = parse_transcript("".join(lines)).records
    assert records == (
        WsOpenRecord(t=0.1, conn=1, url=None),
        WsEnd(t=0.1, conn=1, how="closed"),
    )


@pytest.mark.parametrize(
    ("body", "text", "size"),
    [(b'{"message":"gone"}', '{"message":"gone"}', None), (b"\xff\x00", None, 2)],
)
def test_the_recorder_records_upgrade_rejections_with_their_body(
    body: bytes, text: str | None, size: int | None
) -> None:
    lines: list[str] = []
    recorder = TranscriptRecorder(lines.append)
    recorder.connection_opened(OpenConnection(conn_id=1, host="h", port=80, tls=False), 0.0)
    request, client = _upgrade()
    recorder.upgrade_sent(1, client.target, 0.0)
    reply = _server_reply(
        request,
        RejectConnection(
            status_code=410,
            headers=[
                (b"content-length", str(len(body)).encode()),
                (b"set-cookie", b"s=" + TOKEN.encode()),
            ],
            has_body=True,
        ),
        RejectData(data=body, body_finished=True),
    )
    _received(recorder, 1, client, reply, 0.5)
    recorder.connection_lost(1, 0.6)
    records = parse_transcript("".join(lines)).records
    assert WsReject(t=0.5, conn=1, status=410, body=text, body_bytes=size) in records
    assert TOKEN not in "".join(lines)


def test_a_rejection_cut_short_by_the_end_of_stream_is_still_recorded() -> None:
    lines: list[str] = []
    recorder = TranscriptRecorder(lines.append)
    recorder.connection_opened(OpenConnection(conn_id=1, host="h", port=80, tls=False), 0.0)
    _, client = _upgrade()
    head = b"HTTP/1.1 503 Service Unavailable\r\ncontent-length: 100\r\n\r\nhalf"
    _received(recorder, 1, client, head, 0.1)
    _received(recorder, 1, client, None, 0.2)  # the end of stream completes the rejection
    recorder.connection_lost(1, 0.2)
    records = parse_transcript("".join(lines)).records
    assert WsReject(t=0.2, conn=1, status=503, body="half") in records


def test_the_recorder_keeps_no_more_of_a_rejection_body_than_the_client_d30() -> None:
    lines: list[str] = []
    recorder = TranscriptRecorder(lines.append)
    recorder.connection_opened(OpenConnection(conn_id=1, host="h", port=80, tls=False), 0.0)
    _, client = _upgrade()
    size = 8 * 1024 * 1024
    head = f"HTTP/1.1 503 No\r\ncontent-length: {size}\r\n\r\n".encode()
    _received(recorder, 1, client, head, 0.1)
    chunk = b"x" * 65536
    for _ in range(size // len(chunk)):
        _received(recorder, 1, client, chunk, 0.1)
    recorder.connection_lost(1, 0.2)
    (reject,) = [r for r in parse_transcript("".join(lines)).records if isinstance(r, WsReject)]
    assert reject.body is not None and len(reject.body) == MAX_REJECTION_BODY
    assert len("".join(lines)) < 2 * MAX_REJECTION_BODY


def test_protocol_violations_and_early_hangups_are_recorded() -> None:
    lines: list[str] = []
    recorder = TranscriptRecorder(lines.append)
    for conn in (1, 2, 3):
        recorder.connection_opened(OpenConnection(conn_id=conn, host="h", port=80, tls=False), 0.0)
    request, one = _upgrade()
    _, two = _upgrade()
    _, three = _upgrade()
    accept = _server_reply(request, AcceptConnection())
    _received(recorder, 1, one, accept + bytes((0xC1, 0x00)), 0.1)  # a reserved bit
    _received(recorder, 1, one, b"more", 0.1)  # nothing after a violation
    _received(recorder, 2, two, b"NOT HTTP\r\n\r\n", 0.1)
    _received(recorder, 3, three, None, 0.1)  # hung up before answering: just an ending
    recorder.connection_lost(3, 0.1)
    recorder.connection_failed(1, "reset", 0.2)
    recorder.connection_closed(2, 0.3)
    records = parse_transcript("".join(lines)).records
    kinds = [(type(r).__name__, getattr(r, "conn", None)) for r in records]
    assert ("WsError", 1) in kinds
    assert ("WsError", 2) in kinds
    assert ("WsError", 3) not in kinds
    assert WsEnd(t=0.2, conn=1, how="failed", message="reset") in records
    assert WsEnd(t=0.3, conn=2, how="closed") in records


def test_rest_exchanges_keep_json_text_or_the_length_of_binary_bodies() -> None:
    lines: list[str] = []
    recorder = TranscriptRecorder(lines.append)
    recorder.begin(base_url="http://h", config=None, created_at="", now=100.0)
    json_req = HttpRequest.build("create_chat", "POST", "/api/v2/chats", json={"a": 1})
    raw_req = HttpRequest.build(
        "upload_chat_file",
        "POST",
        "/api/v2/chats/files",
        query={"organization": "o"},
        body=b"12345",
        content_type="image/png",
    )
    get = HttpRequest.build("get_chat", "GET", "/api/v2/chats/c")
    recorder.rest_exchange(
        json_req,
        HttpResponse(
            status=201, body=b'{"id":"c"}', headers=(("content-type", "application/json"),)
        ),
        sent=100.0,
        now=100.5,
    )
    recorder.rest_exchange(
        raw_req, HttpResponse(status=502, body=b"<html>bad</html>"), sent=101.0, now=101.0
    )
    recorder.rest_exchange(
        get, HttpResponse(status=200, body=b"\x89PNG\x00"), sent=101.0, now=101.0
    )
    recorder.rest_exchange(get, HttpResponse(status=204), sent=101.0, now=101.0)
    recorder.rest_exchange(get, HttpResponse(status=200, body=b"null"), sent=101.0, now=101.0)
    recorder.rest_exchange(get, None, sent=101.0, now=102.0, error="connection refused")
    recorder.rest_exchange(get, None, sent=101.0, now=103.0)
    records = parse_transcript("".join(lines)).records
    assert records[0] == RestExchange(
        t=0.5,
        sent=0.0,
        op="create_chat",
        method="POST",
        path="/api/v2/chats",
        request={"a": 1},
        status=201,
        response={"id": "c"},
        content_type="application/json",
    )
    assert records[1].request_bytes == 5 and records[1].response_text == "<html>bad</html>"  # type: ignore[union-attr]
    assert records[1].path == "/api/v2/chats/files?organization=o"  # type: ignore[union-attr]
    assert records[2].response_bytes == 5  # type: ignore[union-attr]
    assert records[3].status == 204 and records[3].response is None  # type: ignore[union-attr]
    assert records[4].response_text == "null"  # type: ignore[union-attr]
    assert records[5].error == "connection refused"  # type: ignore[union-attr]
    assert records[6].cancelled  # type: ignore[union-attr]
    # What a replay answers with:
    assert records[0].http_response() == HttpResponse(
        status=201, body=b'{"id": "c"}', headers=(("content-type", "application/json"),)
    )  # type: ignore[union-attr]
    assert records[2].http_response().body == bytes(5)  # type: ignore[union-attr]
    assert records[6].http_response() is None  # type: ignore[union-attr]


def test_turns_tools_cancels_and_calls_are_recorded() -> None:
    lines: list[str] = []
    recorder = TranscriptRecorder(lines.append)
    recorder.turn_started(mode="generate", prompt="hi", now=1.0, tools=[WEATHER])
    recorder.turn_started(mode="generate", prompt=42, now=1.0)  # refused by the session too
    call = ToolCall(tool_call_id="c", tool_name="get_weather", input="{}")
    recorder.tools_run([call], [ToolOutcome(tool_call_id="c", output=[1])], sent=1.5, now=2.0)
    recorder.cancelled(KeyboardInterrupt(), 3.0)
    recorder.cancelled(None, 3.0)
    recorder.session_call("interrupt", 4.0, wait=True, timeout=float("inf"))
    recorder.session_call("explode", 4.0)
    recorder.turn_finished(CoderChatError("boom", kind="generic"), 5.0)
    records = parse_transcript("".join(lines)).records
    assert [type(r).__name__ for r in records] == [
        "TurnStarted",
        "ToolRunRecord",
        "Cancel",
        "Cancel",
        "SessionCall",
        "TurnEnd",
    ]
    assert records[0].tools == (WEATHER,)  # type: ignore[union-attr]
    assert records[2].reason == "KeyboardInterrupt"  # type: ignore[union-attr]
    assert records[4] == SessionCall(t=3.0, name="interrupt", wait=True, timeout=None)
    assert records[5].outcome["error"]["type"] == "CoderChatError"  # type: ignore[union-attr]


def test_a_failing_write_stops_the_recording_with_one_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0

    def write(line: str) -> None:
        nonlocal calls
        calls += 1
        raise OSError("disk full")

    recorder = TranscriptRecorder(write)
    with caplog.at_level(logging.WARNING, logger="coder_proto"):
        recorder.begin(base_url="http://h", config=None, created_at="", now=0.0)
        recorder.cancelled(None, 1.0)
    assert recorder.failed and calls == 1
    assert len(caplog.records) == 1


def test_outcome_summaries_describe_results_and_errors() -> None:
    assert (
        outcome_summary(CoderApiError(status=404, method="GET", path="/x"))["error"]["status"]
        == 404
    )
    stream = outcome_summary(CoderStreamError("gone", reason="redial-budget-exhausted"))
    assert stream["error"]["reason"] == "redial-budget-exhausted"
    assert outcome_summary(object())["error"]["message"] == "not a turn result"


def test_lone_surrogates_in_user_text_are_written_as_escapes() -> None:
    record = TurnStarted(t=0, mode="generate", prompt=(UserMessage((TextContent("a\ud800b"),)),))
    text = Transcript(header=Header(), records=(record,)).dumps()
    text.encode("utf-8")
    assert parse_transcript(text).records == (record,)


@settings(max_examples=200, deadline=None)
@given(
    frames=st.lists(st.text(max_size=300), min_size=1, max_size=6),
    chunk=st.integers(1, 64),
    fragment=st.booleans(),
)
def test_received_text_frames_are_recorded_verbatim(
    frames: list[str], chunk: int, fragment: bool
) -> None:
    """Whatever the framing and chunking, the recorder keeps each message's text exactly."""
    lines: list[str] = []
    recorder = TranscriptRecorder(lines.append)
    recorder.connection_opened(OpenConnection(conn_id=1, host="h", port=80, tls=False), 0.0)
    request, client = _upgrade()
    events: list[object] = [AcceptConnection()]
    for text in frames:
        if fragment and len(text) > 1:
            half = len(text) // 2
            events += [Message(data=text[:half], message_finished=False), Message(data=text[half:])]
        else:
            events.append(TextMessage(data=text))
    data = _server_reply(request, *events)
    for i in range(0, len(data), chunk):
        _received(recorder, 1, client, data[i : i + chunk], 0.0)
    got = [r.text for r in parse_transcript("".join(lines)).records if isinstance(r, WsFrame)]
    assert got == frames


@pytest.mark.parametrize("name", sorted(SCENARIOS))
def test_transcripts_of_full_fake_sessions_never_contain_the_token(name: str) -> None:
    """docs/architecture.md rule 6: scan every recorded transcript of a full fake-model session."""
    text, world = record(name)
    assert world.token and world.token not in text
    assert parse_transcript(text).records
