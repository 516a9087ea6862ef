"""A whole transcript as text: one JSON object per line, the header first. ``parse_transcript``
is the strict reader (``TranscriptError`` with the line number for anything malformed,
``TranscriptVersionError`` for a newer format); ``TranscriptWriter`` writes line by line.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable
from typing import Any

import attrs

from ._fields import TranscriptError
from ._records import Header, Record, record_from_json

__all__ = ["Transcript", "TranscriptWriter", "json_line", "parse_transcript"]


def json_line(value: dict[str, Any]) -> str:
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), allow_nan=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        # A lone surrogate (from user text) cannot be written as UTF-8: escape it.
        text = json.dumps(value, ensure_ascii=True, separators=(",", ":"), allow_nan=False)
    return text


@attrs.frozen(kw_only=True)
class Transcript:
    """A parsed transcript: the header and the records in file order."""

    header: Header
    records: tuple[Record, ...] = ()

    def lines(self) -> list[str]:
        """The JSONL lines (without newlines)."""
        return [json_line(self.header.to_json())] + [json_line(r.to_json()) for r in self.records]

    def dumps(self) -> str:
        """The transcript as text, one line per record, newline-terminated."""
        return "".join(line + "\n" for line in self.lines())

    def of(self, kind: type[Any]) -> list[Any]:
        """The records of one type, in order."""
        return [r for r in self.records if isinstance(r, kind)]


def parse_transcript(source: str | bytes | Iterable[str]) -> Transcript:
    """Read a transcript strictly: the header first, then one record per line (blank lines
    are allowed). Raises ``TranscriptError`` (with the line number) for a line that is not
    JSON or a record that is malformed, and ``TranscriptVersionError`` for a newer format."""
    if isinstance(source, bytes):
        try:
            source = source.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise TranscriptError(f"not UTF-8 text (byte {exc.start})") from None
    # Only "\n" ends a line: str.splitlines() would also split at U+0085 or U+2028, which
    # JSON text written without ASCII escapes may hold.
    lines: Iterable[str] = source.split("\n") if isinstance(source, str) else source
    header: Header | None = None
    records: list[Record] = []
    for number, raw in enumerate(lines, 1):
        text = raw.strip(" \t\r\n")
        if not text:
            continue
        try:
            data = json.loads(text)
        except (ValueError, RecursionError) as exc:
            raise TranscriptError(f"not JSON ({exc})", line=number) from None
        if header is None:
            header = Header.from_json(data, number)
        else:
            records.append(record_from_json(data, line=number))
    if header is None:
        raise TranscriptError("empty transcript: no header line")
    return Transcript(header=header, records=tuple(records))


class TranscriptWriter:
    """Writes a transcript line by line through ``write`` (for example a text file's
    ``write``); each call writes one whole line, newline included."""

    def __init__(self, write: Callable[[str], object]) -> None:
        self._write = write
        self.lines_written = 0

    def header(self, header: Header) -> None:
        self._emit(header.to_json())

    def record(self, record: Record) -> None:
        self._emit(record.to_json())

    def _emit(self, value: dict[str, Any]) -> None:
        self._write(json_line(value) + "\n")
        self.lines_written += 1
