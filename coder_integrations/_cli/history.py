"""The local chat log of ``coder-agent``: one JSON line per ``run`` or ``chat`` session that
reached a chat on a deployment (not on ``--fake``, whose chats end with the command), in
``$XDG_DATA_HOME/coder-agents/chats.jsonl`` (``~/.local/share`` when the variable is not
set). ``coder-agent log`` lists it; ``--continue`` takes the latest chat of the deployment
from it. A line holds the chat id, the time (UTC), the deployment URL, the session's first
prompt (up to 200 characters), the cursor and the command; never a token."""

from __future__ import annotations

import datetime
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["Entry", "append", "chats", "latest", "log_path"]

#: At most this many characters of the first prompt are kept.
PROMPT_CHARS = 200


def log_path() -> Path:
    """Where the log lives: ``$XDG_DATA_HOME/coder-agents/chats.jsonl``."""
    base = os.environ.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / "coder-agents" / "chats.jsonl"


@dataclass
class Entry:
    """One chat of the log: the first session's time and prompt, the latest cursor."""

    chat_id: str
    time: str
    deployment: str
    prompt: str
    last_seen_message_id: int | None
    command: str
    sessions: int = 1


def append(
    *,
    chat_id: str,
    deployment: str,
    prompt: str,
    last_seen_message_id: int | None,
    command: str,
) -> None:
    """Add one session to the log. A log that cannot be written is skipped: the run
    itself succeeded, and its chat id is printed anyway."""
    line = {
        "chat_id": chat_id,
        "time": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "deployment": deployment,
        "prompt": prompt[:PROMPT_CHARS],
        "last_seen_message_id": last_seen_message_id,
        "command": command,
    }
    path = log_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as f:
            f.write(json.dumps(line, ensure_ascii=False) + "\n")
    except OSError:
        pass


def _lines() -> list[dict[str, Any]]:
    try:
        text = log_path().read_text(encoding="utf-8", errors="replace")
    except OSError:
        return []
    rows = []
    for raw in text.splitlines():
        try:
            row = json.loads(raw)
        except ValueError:
            continue  # a line cut short by a crash: the others still count
        if isinstance(row, dict) and isinstance(row.get("chat_id"), str):
            rows.append(row)
    return rows


def _same(a: str, b: str) -> bool:
    return a.strip().rstrip("/").lower() == b.strip().rstrip("/").lower()


def chats(deployment: str | None = None) -> list[Entry]:
    """The chats of the log, the most recently used last; only ``deployment``'s when given."""
    found: dict[str, Entry] = {}
    for row in _lines():
        where = str(row.get("deployment") or "")
        if deployment is not None and not _same(where, deployment):
            continue
        cursor = row.get("last_seen_message_id")
        cursor = cursor if isinstance(cursor, int) else None
        entry = found.pop(row["chat_id"], None)
        if entry is None:
            entry = Entry(
                chat_id=row["chat_id"],
                time=str(row.get("time") or ""),
                deployment=where,
                prompt=str(row.get("prompt") or ""),
                last_seen_message_id=cursor,
                command=str(row.get("command") or ""),
            )
        else:
            entry.sessions += 1
            if cursor is not None:
                entry.last_seen_message_id = cursor
        found[row["chat_id"]] = entry
    return list(found.values())


def latest(deployment: str) -> Entry | None:
    """The chat of ``deployment`` used last, for ``--continue``."""
    entries = chats(deployment)
    return entries[-1] if entries else None
