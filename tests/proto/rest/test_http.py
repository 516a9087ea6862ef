"""REST requests as values and the classification of error responses (wire 1.1, 2, 10)."""

from __future__ import annotations

from coder_proto._rest.http import HttpRequest, HttpResponse, api_error_from_response, build_path


def test_json_body_gets_content_type_and_compact_bytes_wire_1_1() -> None:
    req = HttpRequest.build(
        "create_chat", "post", "/api/v2/chats", json={"organization_id": "o", "x": "é"}
    )
    assert req.method == "POST" and req.body == '{"organization_id":"o","x":"é"}'.encode()
    assert req.headers == (("Content-Type", "application/json"),)


def test_no_body_means_no_content_type_wire_1_1() -> None:
    req = HttpRequest.build(
        "interrupt_chat", "POST", "/api/v2/chats/c/interrupt", query={"wait": True}
    )
    assert (
        req.headers == () and req.body is None and req.path == "/api/v2/chats/c/interrupt?wait=true"
    )
    raw = HttpRequest.build(
        "upload_chat_file",
        "POST",
        "/api/v2/chats/files",
        body=b"\x89PNG",
        content_type="image/png",
        headers=(("Content-Disposition", "attachment"),),
    )
    assert raw.headers == (("Content-Type", "image/png"), ("Content-Disposition", "attachment"))


def test_query_parameters_only_when_given() -> None:
    assert (
        build_path("/p", {"before_id": None, "after_id": 5, "limit": 200})
        == "/p?after_id=5&limit=200"
    )
    assert build_path("/p", {"a": None}) == "/p" and build_path("/p") == "/p"
    assert (
        build_path("/p", {"organization": "a b/c", "f": False})
        == "/p?organization=a%20b%2Fc&f=false"
    )


def test_with_path_keeps_everything_else() -> None:
    req = HttpRequest.build("get_chat", "GET", "/api/v2/chats/c")
    legacy = req.with_path("/api/experimental/chats/c")
    assert (
        legacy.path == "/api/experimental/chats/c"
        and legacy.op == "get_chat"
        and legacy.method == "GET"
    )


def test_response_json_is_tolerant_wire_2() -> None:
    assert HttpResponse(status=204).json() is None
    assert HttpResponse(status=200, body=b"{oops").json() is None
    resp = HttpResponse(
        status=200, body=b'{"a":1}', headers=(("content-type", "application/json"),)
    )
    assert resp.ok and resp.json() == {"a": 1} and resp.header("Content-Type") == "application/json"
    assert resp.header("x-missing") is None and not HttpResponse(status=302).ok


def test_api_error_from_body_message_and_detail_wire_10() -> None:
    req = HttpRequest.build(
        "create_chat_message", "POST", "/api/v2/chats/c/messages", json={"content": []}
    )
    resp = HttpResponse(
        status=429,
        body=b'{"message":"Message queue is full.","detail":"Maximum 20 messages can be queued.",'
        b'"validations":[{"field":"x","detail":"y"}],"kind":"k"}',
    )
    err = api_error_from_response(req, resp, chat_id="c")
    assert str(err) == (
        "Coder API POST /api/v2/chats/c/messages failed (429): Message queue is full."
        " — Maximum 20 messages can be queued."
    )
    assert (
        err.retryable
        and err.chat_id == "c"
        and err.validations == ({"field": "x", "detail": "y"},)
        and err.kind == "k"
    )


def test_api_error_falls_back_to_reason_then_status_text() -> None:
    req = HttpRequest.build("get_chat", "GET", "/api/v2/chats/c")
    assert (
        api_error_from_response(req, HttpResponse(status=404, reason="Gone Fishing")).server_message
        == "Gone Fishing"
    )
    assert (
        api_error_from_response(req, HttpResponse(status=404, body=b"<html>")).server_message
        == "Not Found"
    )
    assert (
        api_error_from_response(
            req, HttpResponse(status=404, body=b'{"message":""}')
        ).server_message
        == "Not Found"
    )
