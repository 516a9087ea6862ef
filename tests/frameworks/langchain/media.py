"""A small PNG and a small PDF made in the tests, and what the fake server keeps of the files a
chat's user messages carry, read back over loopback through the blocking client."""

from __future__ import annotations

import base64
import struct
import zlib

from coder_integrations.fake_server import FakeCoderServer
from coder_io_sync import CoderChatClient


def _chunk(kind: bytes, data: bytes) -> bytes:
    body = kind + data
    return struct.pack(">I", len(data)) + body + struct.pack(">I", zlib.crc32(body))


#: A 1x1 red PNG.
PNG = (
    b"\x89PNG\r\n\x1a\n"
    + _chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
    + _chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00"))
    + _chunk(b"IEND", b"")
)
#: A one-page PDF that says "Hello".
PDF = (
    b"%PDF-1.4\n"
    b"1 0 obj <</Type /Catalog /Pages 2 0 R>> endobj\n"
    b"2 0 obj <</Type /Pages /Kids [3 0 R] /Count 1>> endobj\n"
    b"3 0 obj <</Type /Page /Parent 2 0 R /MediaBox [0 0 200 100]>> endobj\n"
    b"trailer <</Root 1 0 R>>\n%%EOF\n"
)
PNG_B64 = base64.b64encode(PNG).decode()
PDF_B64 = base64.b64encode(PDF).decode()


def user_messages(server: FakeCoderServer, chat_id: str) -> list[list[tuple[str, object]]]:
    """Each user message of the chat, oldest first, as its parts in order: ``("text", text)``
    or ``(media type, the file's bytes as downloaded)``."""
    client = CoderChatClient(base_url=server.url, token=server.token)
    try:
        response = client.get_messages(chat_id)
        out: list[list[tuple[str, object]]] = []
        for message in sorted(response.messages, key=lambda m: m.id):
            if message.role != "user":
                continue
            parts: list[tuple[str, object]] = []
            for part in message.content:
                if part.type == "text":
                    parts.append(("text", part.text))  # type: ignore[union-attr]
                elif part.type == "file":
                    assert part.file_id is not None  # type: ignore[union-attr]
                    stored = client.get_chat_file(part.file_id)  # type: ignore[union-attr]
                    assert stored.media_type == part.media_type  # type: ignore[union-attr]
                    parts.append((stored.media_type, stored.data))
            out.append(parts)
        return out
    finally:
        client.close()
