"""The redactor: the session token out of server text, its encoded forms included, chat
content left alone (docs/architecture.md rule 6, docs/robustness.md)."""

from __future__ import annotations

import json

from coder_proto._redact import REDACTED, Redactor

TOKEN = "Secret-token_0123456789"


def test_every_occurrence_is_replaced_with_the_marker() -> None:
    r = Redactor(TOKEN)
    assert r.text(f"a {TOKEN} b{TOKEN}c") == f"a {REDACTED} b{REDACTED}c"
    assert r.text("nothing here") == "nothing here"
    assert r.data(f"x{TOKEN}y".encode()) == f"x{REDACTED}y".encode()
    assert r.data(b"nothing here") == b"nothing here"


def test_the_forms_an_echo_may_use_are_replaced_too() -> None:
    token = 'a/b+c d"e\\f\u00e9-0123456789'
    r = Redactor(token)
    percent = "a%2Fb%2Bc%20d%22e%5Cf%C3%A9-0123456789"
    plus = "a%2Fb%2Bc+d%22e%5Cf%C3%A9-0123456789"
    escaped = json.dumps(token)[1:-1]
    assert "\\u00e9" in escaped
    for form in (token, percent, plus, escaped, json.dumps(token, ensure_ascii=False)[1:-1]):
        assert r.found(form) and r.found(form.encode())
        assert r.text(f"<{form}>") == f"<{REDACTED}>"
        assert r.data(f"<{form}>".encode()) == f"<{REDACTED}>".encode()
    body = json.dumps({"message": f"bad token {token}"}).encode()
    assert token.encode() not in r.data(body) and b"bad token <redacted>" in r.data(body)


def test_go_s_html_safe_json_escapes_are_replaced_too() -> None:
    # The server's encoder writes <, > and & as \u003c, \u003e and \u0026 inside strings.
    r = Redactor("a<b>c&d-0123456789")
    body = b'{"message":"a\\u003cb\\u003ec\\u0026d-0123456789 refused"}'
    assert r.data(body) == b'{"message":"<redacted> refused"}'


def test_a_short_token_is_replaced_only_where_it_stands_alone() -> None:
    r = Redactor("t")
    message = "ConnectionRefusedError: [Errno 111] Connection refused"
    assert r.text(message) == message
    assert r.text("token t in ?x=t&y=1") == f"token {REDACTED} in ?x={REDACTED}&y=1"
    assert r.data(b"t, at") == REDACTED.encode() + b", at"
    assert r.data(b"nothing") == b"nothing"


def test_without_a_token_nothing_changes() -> None:
    r = Redactor(None)
    assert not r and not Redactor("")
    assert repr(r) == "<Redactor idle>" and repr(Redactor(TOKEN)) == "<Redactor armed>"
    assert TOKEN not in repr(Redactor(TOKEN))
    assert not r.found(TOKEN) and not r.found(TOKEN.encode())
    assert r.text(TOKEN) == TOKEN and r.data(TOKEN.encode()) == TOKEN.encode()
    assert r.json(TOKEN) == TOKEN and r.json_data(TOKEN.encode()) == TOKEN.encode()


def test_headers_lose_the_token_from_their_values() -> None:
    r = Redactor(TOKEN)
    assert r.headers([("x-echo", f"got {TOKEN}"), ("content-type", "text/plain")]) == (
        ("x-echo", f"got {REDACTED}"),
        ("content-type", "text/plain"),
    )


def _frame(*items: object) -> str:
    return json.dumps(list(items))


def test_in_a_json_document_only_the_error_texts_are_redacted() -> None:
    r = Redactor(TOKEN)
    text = f"the model says {TOKEN}"
    frame = _frame(
        {"type": "message_part", "chat_id": "c", "part": {"type": "text", "text": text}},
        {"type": "error", "chat_id": "c", "error": {"message": f"m {TOKEN}", "detail": TOKEN}},
        {"type": "retry", "chat_id": "c", "retry": {"attempt": 1, "error": f"e {TOKEN}"}},
        {"id": "c", "last_error": {"message": TOKEN, "retryable": False}, "title": TOKEN},
        {"type": "error", "data": {"message": f"legacy {TOKEN}"}},
        {"type": "data", "data": {"message": TOKEN}},
    )
    out = json.loads(r.json(frame))
    assert out[0]["part"]["text"] == text
    assert out[1]["error"] == {"message": f"m {REDACTED}", "detail": REDACTED}
    assert out[2]["retry"]["error"] == f"e {REDACTED}"
    assert out[3]["last_error"]["message"] == REDACTED and out[3]["title"] == TOKEN
    assert out[4]["data"]["message"] == f"legacy {REDACTED}"
    assert out[5]["data"]["message"] == TOKEN


def test_a_document_whose_token_is_all_content_is_returned_as_it_was() -> None:
    r = Redactor(TOKEN)
    frame = _frame({"type": "message_part", "part": {"type": "text", "text": TOKEN}})
    assert r.json(frame) is frame
    body = frame.encode()
    assert r.json_data(body) is body
    plain = '{"message": "no secret"}'
    assert r.json(plain) is plain
    assert r.json_data(plain.encode()) == plain.encode()


def test_a_body_redacts_its_error_objects_and_keeps_its_content() -> None:
    r = Redactor(TOKEN)
    body = json.dumps({"title": TOKEN, "last_error": {"message": TOKEN}}).encode()
    out = json.loads(r.json_data(body))
    assert out == {"title": TOKEN, "last_error": {"message": REDACTED}}


def test_text_that_is_not_json_is_redacted_whole_but_a_body_is_kept() -> None:
    r = Redactor(TOKEN)
    assert r.json(f"not json {TOKEN}") == f"not json {REDACTED}"
    deep = "[" * 100_000 + f'"{TOKEN}"' + "]" * 100_000
    assert TOKEN not in r.json(deep)
    # A success body that is not JSON may be a file's bytes: left as it came.
    data = b"\x89PNG " + TOKEN.encode()
    assert r.json_data(data) is data
    assert r.json_data(deep.encode()) == deep.encode()


def test_a_text_cut_short_loses_the_beginning_of_the_token_it_ends_with() -> None:
    r = Redactor(TOKEN)
    assert r.cut_text(f"bad {TOKEN[:12]}") == f"bad {REDACTED}"
    assert r.cut_text(f"bad {TOKEN[:8]}") == f"bad {REDACTED}"
    # Fewer than 8 characters of it could be any word's ending: they stay.
    assert r.cut_text(f"bad {TOKEN[:7]}") == f"bad {TOKEN[:7]}"
    assert r.cut_text(f"{TOKEN} and {TOKEN[:10]}") == f"{REDACTED} and {REDACTED}"
    assert r.cut_text("nothing") == "nothing"
    assert r.cut_data(f"bad {TOKEN[:12]}".encode()) == f"bad {REDACTED}".encode()
    assert r.cut_data(b"nothing") == b"nothing"
    assert Redactor(None).cut_text(TOKEN[:12]) == TOKEN[:12]
