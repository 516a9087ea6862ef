"""The fallback title of a chat, as the server derives it from the first message
(server-behaviour 1.5): the message's words, or those of pasted-text attachments when it has
none, cut to the first six and at most 80 characters."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any, Final

from ._rows import FakeFile

__all__ = ["DEFAULT_TITLE", "fallback_title"]

#: The title of a chat with no words to take one from.
DEFAULT_TITLE: Final = "New Chat"
_MAX_WORDS: Final = 6
_MAX_CHARACTERS: Final = 80
#: The name the chat UI gives a long paste it turns into an attachment.
_PASTE_NAME: Final = re.compile(r"^pasted-text-[0-9-]+\.txt$")


def fallback_title(content: Iterable[Mapping[str, Any]], files: Mapping[str, FakeFile]) -> str:
    """The title of a chat whose first message is ``content`` (stored parts)."""
    words = _title_text(list(content), files).split()
    if not words:
        return DEFAULT_TITLE
    title = " ".join(words[:_MAX_WORDS])
    if len(words) > _MAX_WORDS:
        return title[: _MAX_CHARACTERS - 1] + "…"
    return title[:_MAX_CHARACTERS]


def _title_text(parts: list[Mapping[str, Any]], files: Mapping[str, FakeFile]) -> str:
    """The text a title is taken from: the text and file-reference parts in order, else the
    text of pasted-text attachments."""
    texts = []
    for part in parts:
        if part.get("type") == "text" and str(part.get("text", "")).strip():
            texts.append(str(part["text"]).strip())
        elif part.get("type") == "file-reference":
            texts.append(_reference_text(part))
    if texts:
        return " ".join(texts)
    pastes = []
    for part in parts:
        stored = files.get(str(part.get("file_id"))) if part.get("type") == "file" else None
        if (
            stored is not None
            and _PASTE_NAME.match(stored.name)
            and stored.media_type.startswith(("text/", "application/json"))
        ):
            pastes.append(stored.data.decode("utf-8", "replace").strip())
    return "\n\n".join(pastes)


def _reference_text(part: Mapping[str, Any]) -> str:
    """A file reference as the model reads it: ``[file-reference] name:lines``, then the code."""
    start, end = part.get("start_line"), part.get("end_line")
    lines = f"{start}" if start == end else f"{start}-{end}"
    text = f"[file-reference] {part.get('file_name', '')}:{lines}"
    code = str(part.get("content") or "").strip()
    return f"{text}\n```{part.get('file_name', '')}\n{code}\n```" if code else text
