"""The pure model's REST surface: auth, prefixes and the legacy profile, model routes,
pagination, uploads (server-behaviour 1, 7; wire 1, 7, 8; D16)."""

from __future__ import annotations

import pytest

from coder_proto._wire import ChatMessagesResponse, ModelCatalog
from coder_proto.fake import FakeHttpResponse, StreamSubscription, WatchSubscription

from .support import LEGACY, V2, Api

PNG = b"\x89PNG\r\n\x1a\n" + b"\x00" * 32


def test_requests_need_the_session_token() -> None:
    api = Api()
    chat_id = api.create("hi")
    missing = api.model.handle_http("GET", f"{V2}/{chat_id}", {}, b"", 0.0)
    assert missing.status == 401
    wrong = api.model.handle_http(
        "GET", f"{V2}/{chat_id}", {"Coder-Session-Token": "nope"}, b"", 0.0
    )
    assert wrong.status == 401
    assert api.model.token not in wrong.body.decode()
    by_query = api.model.handle_http(
        "GET", f"{V2}/{chat_id}?coder_session_token={api.model.token}", [], b"", 0.0
    )
    assert by_query.status == 200
    by_cookie = api.model.handle_http(
        "GET",
        f"{V2}/{chat_id}",
        [("Cookie", f"a=b; coder_session_token={api.model.token}")],
        b"",
        0.0,
    )
    assert by_cookie.status == 200
    assert all(api.model.token not in r.path for r in api.model.counters.request_log)
    upgrade = api.model.handle_upgrade(f"{V2}/{chat_id}/stream", {}, 0.0)
    assert isinstance(upgrade, FakeHttpResponse) and upgrade.status == 401


@pytest.mark.parametrize("prefix", [V2, LEGACY])
def test_the_compatibility_window_serves_both_prefixes(prefix: str) -> None:
    """D36: ``experimental_mount`` is a server of the compatibility window, with the same chat
    routes under both prefixes."""
    api = Api(prefix=prefix, experimental_mount=True)
    chat_id = api.create("hello")
    assert api.chat(chat_id)["id"] == chat_id
    other = V2 if prefix == LEGACY else LEGACY
    assert api.request("GET", f"{other}/{chat_id}", absolute=True).status == 200
    org = f"/api/experimental/organizations/{api.model.organization_id}/chats/models"
    assert api.request("GET", org, absolute=True).status == 200


def test_the_newest_server_answers_404_under_the_experimental_prefix() -> None:
    """D36: by default the chat routes live under ``/api/v2`` only; every chat route and
    the experimental-only model routes answer 404 under ``/api/experimental``."""
    api = Api()
    chat_id = api.create("hello")
    assert api.chat(chat_id)["id"] == chat_id
    org = f"/api/experimental/organizations/{api.model.organization_id}/chats/models"
    for method, path in (
        ("GET", LEGACY),
        ("POST", LEGACY),
        ("GET", f"{LEGACY}/{chat_id}"),
        ("GET", f"{LEGACY}/{chat_id}/messages"),
        ("POST", f"{LEGACY}/{chat_id}/interrupt"),
        ("GET", f"{LEGACY}/models"),
        ("GET", f"{LEGACY}/model-configs"),
        ("GET", org),
    ):
        response = api.request(method, path, absolute=True)
        assert response.status == 404, path
        assert response.json()["message"] == "Route not found."
    upgrade = api.model.handle_upgrade(f"{LEGACY}/{chat_id}/stream", api.headers, 0.0)
    assert isinstance(upgrade, FakeHttpResponse) and upgrade.status == 404
    assert isinstance(
        api.model.handle_upgrade(f"{V2}/{chat_id}/stream", api.headers, 0.0), StreamSubscription
    )


def test_legacy_only_profile_answers_404_under_v2() -> None:
    """D16 / wire 1.4: an older server has only ``/api/experimental``."""
    api = Api(prefix=LEGACY, legacy_only=True)
    chat_id = api.create("hello")
    for path in (V2, f"{V2}/{chat_id}", f"{V2}/{chat_id}/messages"):
        assert api.request("GET", path, absolute=True).status == 404
    org_route = f"/api/v2/organizations/{api.model.organization_id}/chats/models"
    assert api.request("GET", org_route, absolute=True).status == 404
    legacy = api.request("GET", f"{LEGACY}/model-configs", absolute=True)
    assert legacy.status == 200
    assert ModelCatalog.from_legacy_json(legacy.json()).models
    upgrade = api.model.handle_upgrade(f"{V2}/{chat_id}/stream", api.headers, 0.0)
    assert isinstance(upgrade, FakeHttpResponse) and upgrade.status == 404
    assert isinstance(
        api.model.handle_upgrade(f"{LEGACY}/{chat_id}/stream", api.headers, 0.0), StreamSubscription
    )


def test_model_routes() -> None:
    """Wire 8 / D16: the org route lists models with providers; no ``provider`` string on a
    model; v2 reserves ``/chats/models`` and ``/chats/model-configs``."""
    api = Api(experimental_mount=True)
    org = api.model.organization_id
    response = api.request("GET", f"/api/v2/organizations/{org}/chats/models", absolute=True)
    assert response.status == 200
    body = response.json()
    assert body["unsupported_providers"] == []
    assert all("provider" not in m for m in body["models"])
    catalog = ModelCatalog.from_json(body)
    by_model = {m.model: m for m in catalog.models}
    assert by_model["claude-sonnet-4-6"].provider == "anthropic"
    assert by_model["claude-sonnet-4-6"].is_default is True
    assert by_model["gpt-5"].provider == "openai"
    assert by_model["claude-opus-legacy"].enabled is False
    assert (
        api.request(
            "GET", f"/api/experimental/organizations/{org}/chats/models", absolute=True
        ).status
        == 200
    )
    other = "00000000-0000-4000-8000-000000000000"
    assert (
        api.request("GET", f"/api/v2/organizations/{other}/chats/models", absolute=True).status
        == 404
    )
    for reserved in ("/models", "/model-configs", "/providers", "/user-provider-configs"):
        assert api.request("GET", V2 + reserved, absolute=True).status == 404
    assert api.request("GET", f"{LEGACY}/models", absolute=True).json()["models"]
    assert len(api.request("GET", f"{LEGACY}/model-configs", absolute=True).json()) == 3
    assert (
        api.request("POST", f"/api/v2/organizations/{org}/chats/models", absolute=True).status
        == 405
    )
    assert api.request("POST", f"{LEGACY}/model-configs", absolute=True).status == 405


def test_unknown_routes_and_methods() -> None:
    api = Api()
    assert api.request("GET", "/api/v2/workspaces", absolute=True).status == 404
    assert api.request("GET", "/api/v2/users/me/keys", absolute=True).status == 404
    assert api.request("GET", f"{V2}/a/b/c/d", absolute=True).status == 404
    assert api.request("DELETE", "").status == 405
    assert api.request("GET", "/").status == 200, "a trailing slash lists chats"
    missing = "00000000-0000-4000-8000-000000000000"
    not_found = api.request("GET", f"/{missing}")
    assert not_found.status == 404
    assert (
        not_found.json()["message"]
        == "Resource not found or you do not have access to this resource"
    )


def test_stream_route_checks_before_the_upgrade() -> None:
    """Server-behaviour 3.1: 404 unknown chat, 400 bad ``after_id``, as plain HTTP."""
    api = Api()
    chat_id = api.create("hi")
    missing = "00000000-0000-4000-8000-000000000000"
    cases = {
        f"/{missing}/stream": 404,
        f"/{chat_id}/stream?after_id=abc": 400,
        f"/{chat_id}/stream?after_id= 1": 400,
        f"/{chat_id}/stream?after_id=9223372036854775808": 400,
        f"/{chat_id}/messages/stream": 405,
    }
    for path, status in cases.items():
        response = api.model.handle_upgrade(V2 + path, api.headers, 0.0)
        assert isinstance(response, FakeHttpResponse)
        assert response.status == status, path
    bad = api.model.handle_upgrade(f"{V2}/{chat_id}/stream?after_id=x", api.headers, 0.0)
    assert isinstance(bad, FakeHttpResponse)
    assert bad.json() == {
        "message": "Invalid after_id parameter.",
        "detail": 'strconv.ParseInt: parsing "x": invalid syntax',
    }
    # Any int64 is a cursor, as Go's ParseInt reads it: -1 and +3 replay like 0 and 3.
    for cursor in ("-1", "%2B3"):
        subscription = api.model.handle_upgrade(
            f"{V2}/{chat_id}/stream?after_id={cursor}", api.headers, 0.0
        )
        assert isinstance(subscription, StreamSubscription), cursor
    assert api.model.handle_upgrade(f"{V2}/{chat_id}", api.headers, 0.0).status == 400  # type: ignore[union-attr]
    assert isinstance(
        api.model.handle_upgrade(f"{V2}/{chat_id}/stream?after_id=", api.headers, 0.0),
        StreamSubscription,
    )
    plain = api.request("GET", f"/{chat_id}/stream")
    assert plain.status == 426
    assert api.request("GET", "/watch").status == 426
    assert isinstance(api.model.handle_upgrade(f"{V2}/watch", api.headers, 0.0), WatchSubscription)
    assert api.model.counters.stream_dials[chat_id] == 7, "every upgrade attempt counts"


# -- pagination (server-behaviour 7) ------------------------------------------------------------


def _chat_with_messages(api: Api, turns: int = 3) -> tuple[str, list[int]]:
    chat_id = api.create("t0")
    for n in range(1, turns):
        api.run_until(chat_id, {"waiting"})
        api.send(chat_id, f"t{n}")
    api.run_until(chat_id, {"waiting"})
    ids = [m.id for m in api.model.chats[chat_id].visible_messages()]
    return chat_id, ids


def test_pagination_newest_first_by_default() -> None:
    api = Api()
    chat_id, ids = _chat_with_messages(api)
    page = api.messages(chat_id)
    assert [m["id"] for m in page["messages"]] == ids[::-1]
    assert page["has_more"] is False
    one = api.messages(chat_id, "?limit=1")
    assert [m["id"] for m in one["messages"]] == [ids[-1]], "limit=1 gives the newest id"
    assert one["has_more"] is True
    ChatMessagesResponse.from_json(one)


def test_pagination_after_id_only_is_ascending() -> None:
    api = Api()
    chat_id, ids = _chat_with_messages(api)
    page = api.messages(chat_id, f"?after_id={ids[1]}&limit=2")
    assert [m["id"] for m in page["messages"]] == ids[2:4]
    assert page["has_more"] is True
    assert page["queued_messages"] == []
    last = api.messages(chat_id, f"?after_id={ids[-3]}&limit=2")
    assert [m["id"] for m in last["messages"]] == ids[-2:]
    assert last["has_more"] is False


def test_pagination_before_id_and_both_are_descending() -> None:
    api = Api()
    chat_id, ids = _chat_with_messages(api)
    before = api.messages(chat_id, f"?before_id={ids[-1]}&limit=2")
    assert [m["id"] for m in before["messages"]] == [ids[-2], ids[-3]]
    assert before["has_more"] is True
    both = api.messages(chat_id, f"?after_id={ids[0]}&before_id={ids[3]}")
    assert [m["id"] for m in both["messages"]] == [ids[2], ids[1]]
    assert both["has_more"] is False


def test_pagination_queued_messages_only_without_cursors() -> None:
    api = Api()
    chat_id, ids = _chat_with_messages(api, turns=1)
    api.send(chat_id, "running")
    api.send(chat_id, "queued")
    assert [q["content"][0]["text"] for q in api.messages(chat_id)["queued_messages"]] == ["queued"]
    assert api.messages(chat_id, f"?before_id={ids[-1] + 100}")["queued_messages"] == []


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("?limit=0", "Invalid limit parameter (1-200)."),
        ("?limit=201", "Invalid limit parameter (1-200)."),
        ("?limit=x", "Query parameters have invalid values."),
        ("?after_id=0", "Query parameters have invalid values."),
        ("?before_id=-5", "Query parameters have invalid values."),
        ("?before_id=abc", "Query parameters have invalid values."),
        ("?after_id=5&before_id=5", "after_id must be less than before_id."),
        ("?after_id=6&before_id=5", "after_id must be less than before_id."),
    ],
)
def test_pagination_validation(query: str, message: str) -> None:
    api = Api()
    chat_id = api.create("x")
    response = api.request("GET", f"/{chat_id}/messages{query}")
    assert response.status == 400
    assert response.json()["message"] == message
    if message == "Query parameters have invalid values.":
        assert response.json()["validations"]


def test_pagination_hides_soft_deleted_rows() -> None:
    api = Api()
    chat_id, ids = _chat_with_messages(api, turns=2)
    api.request(
        "PATCH", f"/{chat_id}/messages/{ids[2]}", {"content": [{"type": "text", "text": "edit"}]}
    )
    visible = [m["id"] for m in api.messages(chat_id)["messages"]]
    assert ids[2] not in visible and ids[3] not in visible
    assert ids[0] in visible


def test_pagination_limit_200_pages() -> None:
    api = Api(chunk_delay=0.0)
    chat_id, ids = _chat_with_messages(api, turns=105)
    first = api.messages(chat_id, "?limit=200")
    assert len(first["messages"]) == 200 and first["has_more"] is True
    rest = api.messages(chat_id, f"?before_id={first['messages'][-1]['id']}&limit=200")
    assert len(rest["messages"]) == len(ids) - 200 and rest["has_more"] is False


# -- uploads (server-behaviour 1.2; wire 7) ---------------------------------------------------------


def upload(
    api: Api, data: bytes, media_type: str, *, name: str | None = "f.bin", org: str | None = None
) -> FakeHttpResponse:
    headers = {"Content-Type": media_type}
    if name is not None:
        headers["Content-Disposition"] = f'attachment; filename="{name}"'
    query = f"?organization={org or api.model.organization_id}"
    return api.request("POST", f"/files{query}", raw=data, headers=headers)


def test_upload_round_trip_and_attachment() -> None:
    api = Api()
    response = upload(api, PNG, "image/png", name="pic.png")
    assert response.status == 201
    file_id = response.json()["id"]
    got = api.request("GET", f"/files/{file_id}")
    assert got.status == 200
    assert got.body == PNG
    assert got.header("content-type") == "image/png"
    assert got.header("content-disposition") == "inline; filename=pic.png"
    assert got.header("cache-control") == "private, max-age=31536000, immutable"
    assert got.header("x-content-type-options") == "nosniff"
    chat_id = api.create(
        "look", content=[{"type": "text", "text": "look"}, {"type": "file", "file_id": file_id}]
    )
    history = api.messages(chat_id)["messages"]
    part = history[-1]["content"][1]
    assert (part["type"], part["file_id"], part["media_type"], part["name"]) == (
        "file",
        file_id,
        "image/png",
        "pic.png",
    )
    (metadata,) = api.chat(chat_id)["files"]
    assert metadata["id"] == file_id
    assert (metadata["name"], metadata["mime_type"], metadata["size_bytes"]) == (
        "pic.png",
        "image/png",
        len(PNG),
    )


def test_upload_rules() -> None:
    api = Api()
    cases = [
        (upload(api, b"x" * (10 * 1024 * 1024 + 1), "text/plain"), 413, "File too large."),
        (upload(api, b"zip", "application/zip"), 400, "Unsupported file type."),
        (
            upload(api, b"not a png", "image/png"),
            400,
            "File content type does not match Content-Type header.",
        ),
        (upload(api, b"\x00\x01binary", "application/octet-stream"), 400, "Unsupported file type."),
        (upload(api, b"", "text/plain"), 400, "Invalid file."),
        (upload(api, b"hello", "text/plain", name=None), 400, "Filename is required."),
        (upload(api, b"hello", "text/plain", org="nope"), 400, "Invalid organization ID."),
        (
            upload(api, b"hello", "text/plain", org="00000000-0000-4000-8000-000000000000"),
            403,
            None,
        ),
        (
            api.request("POST", "/files", raw=b"x", headers={"Content-Type": "text/plain"}),
            400,
            "Missing organization query parameter.",
        ),
    ]
    for response, status, message in cases:
        assert response.status == status, response.json()
        if message is not None:
            assert response.json()["message"] == message
    exact = upload(api, b"x" * (10 * 1024 * 1024), "text/plain")
    assert exact.status == 201, "exactly 10 MiB is allowed"


def test_upload_classification() -> None:
    api = Api()
    sniffed = upload(api, PNG, "application/octet-stream; charset=x")
    assert sniffed.status == 201
    assert api.model.files[sniffed.json()["id"]].media_type == "image/png"
    assert upload(api, b'{"a": 1}', "text/plain").status == 201, "text/plain may hold JSON"
    assert upload(api, b'{"a": 1}', "application/json").status == 201
    assert upload(api, b"a,b\n1,2\n", "text/csv").status == 201
    assert upload(api, b"GIF89a....", "image/gif").status == 201
    assert upload(api, b"\xff\xd8\xff\xe0", "image/jpeg").status == 201
    assert upload(api, b"RIFF\x00\x00\x00\x00WEBPVP8 ", "image/webp").status == 201
    assert upload(api, b"%PDF-1.7", "application/pdf").status == 201
    assert upload(api, b"{broken", "application/json").status == 400
    assert upload(api, b"\x00\x01\x02bad", "text/plain").status == 400
    utf8 = api.request(
        "POST",
        f"/files?organization={api.model.organization_id}",
        raw=b"hi",
        headers={
            "Content-Type": "text/plain",
            "Content-Disposition": "attachment; filename=\"r_sum_.txt\"; filename*=UTF-8''r%C3%A9sum%C3%A9.txt",
        },
    )
    assert api.model.files[utf8.json()["id"]].name == "résumé.txt"
    loose = Api(require_upload_filename=False)
    assert upload(loose, b"hi", "text/plain", name=None).status == 201


@pytest.mark.parametrize(
    ("data", "name", "declared", "stored"),
    [
        # Plain text is refined by the file name's extension.
        (b"# Title\n", "notes.md", "text/plain", "text/markdown"),
        (b"# Title\n", "notes.MARKDOWN", "text/markdown", "text/markdown"),
        (b"a;b\n", "table.csv", "text/plain", "text/csv"),
        (b'{"a": 1}', "data.json", "application/octet-stream", "application/json"),
        (b"{broken", "data.json", "text/plain", "text/plain"),
        (b"just words", "words.txt", "application/octet-stream", "text/plain"),
        # The bytes alone say CSV, JSON or an image, whatever the name.
        (b"a,b\n1,2\n", "table.txt", "text/plain", "text/csv"),
        (b"[1, 2]", "list.txt", "text/plain", "application/json"),
        (PNG, "picture.txt", "application/octet-stream", "image/png"),
        (b"%PDF-1.7", "doc", "", "application/pdf"),
        (b"x" * 200_000, "long.txt", "text/plain", "text/plain"),
        (b"<!-- never closed", "c.txt", "text/plain", "text/plain"),
        (b"<!-- closed --> words", "c.txt", "text/plain", "text/plain"),
        (b'"a JSON string"', "s.json", "text/plain", "application/json"),
        # Other text (HTML) is stored as plain text.
        (b"<!DOCTYPE html><p>x</p>", "page.md", "text/plain", "text/plain"),
        # SVG is kept (and served only as a download), even pasted as text.
        (b"\n  <svg xmlns='http://www.w3.org/2000/svg'/>", "a.txt", "text/plain", "image/svg+xml"),
        (
            b"<?xml version='1.0'?><!-- c --><!DOCTYPE svg><SVG/>",
            "a.svg",
            "application/octet-stream",
            "image/svg+xml",
        ),
    ],
)
def test_uploads_are_typed_from_their_bytes_and_name(
    data: bytes, name: str, declared: str, stored: str
) -> None:
    """D36, as the newest server's chat file typing does it."""
    api = Api()
    response = upload(api, data, declared, name=name)
    assert response.status == 201, response.json()
    assert api.model.files[response.json()["id"]].media_type == stored


@pytest.mark.parametrize(
    ("data", "name", "declared", "message"),
    [
        (b"PK\x03\x04", "a.zip", "application/octet-stream", "Unsupported"),
        (b"<?xml version='1.0'?><root/>", "a.txt", "text/plain", "Unsupported"),
        (b"\x00\x01binary", "a.bin", "application/octet-stream", "Unsupported"),
        (b"\xff\xfe not utf-8", "a.txt", "application/octet-stream", "Unsupported"),
        # A declared type must agree with the stored one; only text/plain may be refined.
        (b"# Title\n", "notes.md", "text/csv", "does not match"),
        (b"just words", "words.txt", "text/markdown", "does not match"),
        (b"a,b\n1,2\n", "t.csv", "application/json", "does not match"),
        (PNG, "p.png", "image/jpeg", "does not match"),
    ],
)
def test_uploads_the_server_refuses(data: bytes, name: str, declared: str, message: str) -> None:
    api = Api()
    response = upload(api, data, declared, name=name)
    assert response.status == 400
    assert message in response.json()["message"]
    assert api.model.files == {}


def test_upload_names_are_trimmed_and_cut_to_255_bytes() -> None:
    api = Api()
    long = "é" * 200 + ".txt"
    response = upload(api, b"hi", "text/plain", name=f"  {long}  ")
    stored = api.model.files[response.json()["id"]]
    assert stored.name == "é" * 127, "cut at a character boundary"
    assert len(stored.name.encode()) == 254
    trimmed = upload(api, b"hi", "text/plain", name=" a.txt ").json()["id"]
    assert api.model.files[trimmed].name == "a.txt"


@pytest.mark.parametrize(
    ("data", "declared", "name", "disposition"),
    [
        (b"%PDF-1.7", "application/pdf", "report.pdf", "attachment; filename=report.pdf"),
        (b"words", "text/plain", "my notes.txt", 'inline; filename="my notes.txt"'),
        (b"words", "text/plain", 'say "hi".txt', 'inline; filename="say \\"hi\\".txt"'),
        (b"words", "text/plain", "résumé.txt", "inline; filename*=utf-8''r%C3%A9sum%C3%A9.txt"),
    ],
)
def test_downloads_use_the_servers_disposition(
    data: bytes, declared: str, name: str, disposition: str
) -> None:
    """Inline for every stored type but PDF; the name laid out as Go's media type formatter
    does; never sniffed."""
    api = Api()
    file_id = upload(api, data, declared, name=name).json()["id"]
    got = api.request("GET", f"/files/{file_id}")
    assert got.header("content-disposition") == disposition
    assert got.header("x-content-type-options") == "nosniff"
    unnamed = Api(require_upload_filename=False)
    file_id = upload(unnamed, b"hi", "text/plain", name=None).json()["id"]
    assert unnamed.request("GET", f"/files/{file_id}").header("content-disposition") == (
        "inline; filename=file"
    )


def test_get_file_errors() -> None:
    api = Api()
    assert api.request("GET", "/files/not-a-uuid").status == 400
    assert api.request("GET", "/files/00000000-0000-4000-8000-000000000000").status == 404


def test_cost_route() -> None:
    api = Api()
    chat_id = api.create("hello")
    api.run_until(chat_id, {"waiting"})
    cost = api.request("GET", f"/{chat_id}/cost").json()
    assert cost["chat_id"] == chat_id
    assert cost["request_count"] == 1
    assert cost["total_cost_micros"] > 0
    assert cost["unpriced_request_count"] == 0


def test_counters_record_requests_per_operation() -> None:
    api = Api()
    chat_id = api.create("x")
    api.request("GET", f"/{chat_id}")
    api.request("GET", f"/{chat_id}")
    api.request("GET", "/api/v2/nothing", absolute=True)
    requests = api.model.counters.requests
    assert requests["create_chat"] == 1
    assert requests["get_chat"] == 2
    assert requests["unknown"] == 1
    log = api.model.counters.request_log
    assert (log[1].method, log[1].op, log[1].status) == ("GET", "get_chat", 200)
    api.model.counters.max_request_log = 4
    for _ in range(6):
        api.request("GET", f"/{chat_id}")
    assert len(api.model.counters.request_log) <= 4
