"""Chat attachments (wire 7, wire 2 upload row, D20)."""

from __future__ import annotations

import json
import re
from typing import Any
from urllib.parse import unquote

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import CoderAgentError, CoderApiError
from coder_proto._rest.http import HttpResponse
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._rest.uploads import (
    build_upload_chat_file,
    check_attachment_size,
    check_media_type,
    content_disposition,
    normalize_media_type,
    parse_upload_chat_file,
    plan_upload,
)

ALLOWED = (
    "application/json, application/pdf, image/gif, image/jpeg, image/png, image/svg+xml, "
    "image/webp, text/csv, text/markdown, text/plain"
)


def reply(status: int, body: Any = None) -> HttpResponse:
    return HttpResponse(status=status, body=b"" if body is None else json.dumps(body).encode())


@pytest.mark.parametrize(
    ("given_type", "normalised"),
    [
        ("text/plain", "text/plain"),
        ("Text/Plain; charset=utf-8", "text/plain"),
        ("  IMAGE/PNG ;x=y;z", "image/png"),
        ("application/json;", "application/json"),
        ("", ""),
    ],
)
def test_wire_7_media_type_normalisation(given_type: str, normalised: str) -> None:
    assert normalize_media_type(given_type) == normalised


@pytest.mark.parametrize(
    "allowed",
    [
        "application/json",
        "application/pdf",
        "image/gif",
        "image/jpeg",
        "image/png",
        "image/svg+xml",
        "image/webp",
        "text/csv",
        "text/markdown",
        "text/plain",
    ],
)
def test_wire_7_allowlist_accepts(allowed: str) -> None:
    assert check_media_type(allowed.upper() + "; charset=x") == allowed


def test_wire_7_disallowed_media_type_message_is_exact() -> None:
    with pytest.raises(CoderAgentError) as info:
        check_media_type("Application/Zip; x=1")
    assert str(info.value) == (
        f'Media type "application/zip" is not allowed for chat attachments (allowed: {ALLOWED}). '
        "Write other file types to a workspace instead."
    )


@pytest.mark.parametrize("missing", [None, "", " ; charset=x", 3])
def test_wire_7_missing_media_type_is_a_clear_error(missing: Any) -> None:
    with pytest.raises(CoderAgentError, match="Could not determine the file's media type"):
        check_media_type(missing)


ACCEPTED_EXTENSIONS = ".json, .pdf, .gif, .jpg, .png, .svg, .webp, .csv, .md, .txt"


@pytest.mark.parametrize("name", ["archive.zip", "/tmp/Build.TAR.GZ", "photo.heic"])
def test_wire_7_a_file_type_not_accepted_is_named_with_the_accepted_ones(name: str) -> None:
    extension = "." + name.rsplit(".", 1)[1].lower()
    base = name.rsplit("/", 1)[-1]
    plan = plan_upload(b"x", filename=name)
    with pytest.raises(CoderAgentError) as info:
        plan.request("org", b"x")
    assert str(info.value) == (
        f'File type "{extension}" of "{base}" is not accepted for chat attachments '
        f"(accepted: {ACCEPTED_EXTENSIONS}). Write other file types to a workspace instead."
    )
    with pytest.raises(CoderAgentError, match="is not accepted") as info:
        check_media_type(None, filename=name)
    assert "media type" not in str(info.value)


def test_wire_7_a_file_without_a_known_type_asks_for_media_type() -> None:
    for name in (None, "README", "notes."):
        with pytest.raises(CoderAgentError) as info:
            plan_upload(b"x", filename=name).request("org", b"x")
        assert str(info.value) == (
            "Could not determine the file's media type: pass media_type "
            f"(accepted: {ALLOWED})."
        )


def test_wire_7_size_cap_is_10_mib_inclusive() -> None:
    check_attachment_size(10 * 1024 * 1024)
    with pytest.raises(CoderAgentError) as info:
        check_attachment_size(10 * 1024 * 1024 + 1)
    assert str(info.value) == (
        "File is 10485761 bytes, over the 10485760-byte (10 MiB) chat attachment limit. "
        "Write large files to a workspace instead."
    )


# -- Content-Disposition ---------------------------------------------------------------------


def test_wire_7_content_disposition_plain_name() -> None:
    assert content_disposition("report.pdf", "application/pdf") == (
        "attachment; filename=\"report.pdf\"; filename*=UTF-8''report.pdf"
    )


def test_wire_7_content_disposition_escapes_and_encodes() -> None:
    header = content_disposition('a "q" \\ b\u00e9.txt', "text/plain")
    assert header == (
        'attachment; filename="a \\"q\\" \\\\ b_.txt"; '
        "filename*=UTF-8''a%20%22q%22%20%5C%20b%C3%A9.txt"
    )


def test_wire_7_rfc5987_also_encodes_quote_parens_and_star() -> None:
    header = content_disposition("it's (1)*!~-_.txt", "text/plain")
    assert header.endswith("filename*=UTF-8''it%27s%20%281%29%2A!~-_.txt")


def test_wire_7_control_characters_cannot_reach_the_header() -> None:
    header = content_disposition("a\r\nX-Evil: 1\x7f.txt", "text/plain")
    assert "\r" not in header
    assert "\n" not in header
    assert 'filename="a__X-Evil: 1_.txt"' in header
    assert "a%0D%0AX-Evil%3A%201%7F.txt" in header


def test_wire_7_non_bmp_characters() -> None:
    header = content_disposition("\U0001f600.png", "image/png")
    assert 'filename="_.png"' in header
    assert "filename*=UTF-8''%F0%9F%98%80.png" in header


def test_lone_surrogates_do_not_raise() -> None:
    header = content_disposition("a\ud800.txt", "text/plain")
    assert header.startswith('attachment; filename="a_.txt"; filename*=UTF-8')


@pytest.mark.parametrize(
    ("media_type", "name"),
    [
        ("image/png", "attachment.png"),
        ("image/jpeg", "attachment.jpg"),
        ("text/markdown; charset=utf-8", "attachment.md"),
        ("application/x-unknown", "attachment.bin"),
    ],
)
def test_D20_without_a_name_use_attachment_plus_extension(media_type: str, name: str) -> None:
    for filename in (None, ""):
        assert content_disposition(filename, media_type) == (
            f"attachment; filename=\"{name}\"; filename*=UTF-8''{name}"
        )


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=30))
def test_wire_7_content_disposition_properties(name: str) -> None:
    """The header is printable ASCII; the ASCII name round-trips once unescaped; the
    percent-encoded name decodes back to the original (when it is valid Unicode)."""
    header = content_disposition(name, "text/plain")
    assert all(0x20 <= ord(c) <= 0x7E for c in header)
    match = re.fullmatch(
        r'attachment; filename="((?:[^"\\]|\\.)*)"; filename\*=UTF-8\'\'(.*)', header
    )
    assert match is not None
    encoded = match.group(2)
    assert re.fullmatch(r"[A-Za-z0-9\-_.!~%]*", encoded)
    if name:
        ascii_name = re.sub(r"\\(.)", r"\1", match.group(1))
        assert len(ascii_name) == len(name)
        assert unquote(encoded, errors="strict") == name


# -- request and response --------------------------------------------------------------------


def test_wire_7_upload_request() -> None:
    request = build_upload_chat_file(
        "org/1", bytearray(b"hello"), media_type="Text/Plain; charset=utf-8", filename="n.txt"
    )
    assert (request.op, request.method, request.path) == (
        "upload_chat_file",
        "POST",
        "/api/v2/chats/files?organization=org%2F1",
    )
    assert request.body == b"hello"
    assert request.json is None
    assert request.headers == (
        ("Content-Type", "text/plain"),
        ("Content-Disposition", "attachment; filename=\"n.txt\"; filename*=UTF-8''n.txt"),
    )


def test_D20_upload_always_sends_a_content_disposition() -> None:
    request = build_upload_chat_file("o", memoryview(b"{}"), media_type="application/json")
    assert dict(request.headers)["Content-Disposition"] == (
        "attachment; filename=\"attachment.json\"; filename*=UTF-8''attachment.json"
    )


def test_wire_7_upload_checks_run_before_any_request() -> None:
    with pytest.raises(CoderAgentError, match="is not allowed"):
        build_upload_chat_file("o", b"x", media_type="application/zip")
    with pytest.raises(CoderAgentError, match="over the 10485760-byte"):
        build_upload_chat_file("o", b"x" * (10 * 1024 * 1024 + 1), media_type="text/plain")
    with pytest.raises(CoderAgentError, match="Unsupported file content"):
        build_upload_chat_file("o", "text", media_type="text/plain")  # type: ignore[arg-type]
    with pytest.raises(CoderAgentError, match="organization_id"):
        build_upload_chat_file("", b"x", media_type="text/plain")
    with pytest.raises(CoderAgentError, match="filename"):
        build_upload_chat_file("o", b"x", media_type="text/plain", filename=3)  # type: ignore[arg-type]


def test_wire_2_upload_success_returns_the_id() -> None:
    request = build_upload_chat_file("o", b"x", media_type="text/plain")
    assert parse_upload_chat_file(request, reply(201, {"id": "f-1"})) == "f-1"


@pytest.mark.parametrize("body", [None, {}, {"id": ""}, {"id": 5}, ["f-1"]])
def test_wire_2_upload_without_id_raises_the_exact_api_error(body: Any) -> None:
    selector = PrefixSelector("/api/experimental/chats")
    request = selector.begin(build_upload_chat_file("o", b"x", media_type="text/plain")).request
    with pytest.raises(CoderApiError) as info:
        parse_upload_chat_file(request, reply(200, body))
    error = info.value
    assert (error.status, error.method, error.path) == (
        200,
        "POST",
        "/api/experimental/chats/files",
    )
    assert error.server_message == "upload succeeded but the response contained no file id"
    assert str(error) == (
        "Coder API POST /api/experimental/chats/files failed (200): "
        "upload succeeded but the response contained no file id"
    )


def test_upload_http_error_is_raised_with_the_full_path() -> None:
    request = build_upload_chat_file("o", b"x", media_type="text/plain")
    with pytest.raises(CoderApiError) as info:
        parse_upload_chat_file(
            request,
            reply(
                413,
                {"message": "File too large.", "detail": "Maximum file size is 10485760 bytes."},
            ),
        )
    assert (info.value.status, info.value.path) == (413, "/api/v2/chats/files?organization=o")
    assert info.value.detail == "Maximum file size is 10485760 bytes."
