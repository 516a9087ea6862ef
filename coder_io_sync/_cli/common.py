"""What ``coder-agent``'s commands share (``coder_io_sync.cli`` and the ``chat`` and
``chats watch`` modules beside this one): the exit statuses, the usage error, the argument
types, the deployment from the flags or the environment, SIGTERM handling and the cursor
check."""

from __future__ import annotations

import argparse
import contextlib
import math
import os
import signal
import types
import urllib.parse
from collections.abc import Iterator
from typing import Any

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_NETWORK = 3
EXIT_TIMEOUT = 4
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
EXIT_TERMINATED = 143

#: Exit status of ``coder-agent``, by failure class.
EXIT_CODES: dict[int, str] = {
    EXIT_OK: "success",
    EXIT_FAILED: "the run failed, or a replay did not reproduce its recording",
    EXIT_USAGE: "usage error: bad argument, missing configuration, unreadable or unwritable file",
    EXIT_NETWORK: "the network or the stream was lost and could not be recovered",
    EXIT_TIMEOUT: "the --timeout deadline passed (the run was interrupted)",
    EXIT_INTERRUPTED: "interrupted by Ctrl-C (the run was interrupted)",
    EXIT_BROKEN_PIPE: "stdout was closed, as in `| head` (the run was interrupted)",
    EXIT_TERMINATED: "terminated by SIGTERM (the run was interrupted)",
}


class UsageError(Exception):
    """A mistake in what the user passed: printed as one line, exit status 2."""


def _seconds(text: str) -> float:
    """An argparse type: a finite number of seconds, 0 or more."""
    try:
        value = float(text.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"takes a number of seconds, 0 or more, got {text!r}")
    return value


def _cursor(text: str) -> int:
    """An argparse type: a message id, 0 or more."""
    try:
        value = int(text.strip())
    except ValueError:
        value = -1
    if value < 0:
        raise argparse.ArgumentTypeError(f"takes a message id (a whole number), got {text!r}")
    return value


def _organization_id(args: argparse.Namespace) -> str | None:
    return (
        args.organization_id
        or os.environ.get("CODER_ORGANIZATION_ID")
        or os.environ.get("CODER_ORG_ID")
        or None
    )


def _deployment(args: argparse.Namespace) -> tuple[str, str]:
    """The base URL and token from the flags or the environment, or a usage error."""
    url = args.url or os.environ.get("CODER_URL")
    if not url:
        raise UsageError("no deployment: pass --url URL or set CODER_URL (or use --fake)")
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        given = f"--url {url}" if args.url else f"CODER_URL={url}"
        raise UsageError(
            f"{given}: not a deployment URL; give http:// or https:// and a host, "
            "as in https://coder.example.com"
        )
    token = args.token or os.environ.get("CODER_SESSION_TOKEN")
    if not token:
        raise UsageError("no session token: pass --token TOKEN or set CODER_SESSION_TOKEN")
    return url, token


class _Signals:
    """SIGTERM as a Ctrl-C for the duration of a run: it goes through the same path (the
    blocking adapter defers it to a blocking point, then the run is interrupted on the
    server), and ``terminated`` tells the two apart for the exit status."""

    def __init__(self) -> None:
        self.terminated = False

    def _handler(self, signum: int, frame: types.FrameType | None) -> None:
        self.terminated = True
        sigint = signal.getsignal(signal.SIGINT)
        if callable(sigint):
            sigint(signal.SIGINT, frame)
        else:
            raise KeyboardInterrupt

    @contextlib.contextmanager
    def installed(self) -> Iterator[None]:
        try:
            previous = signal.signal(signal.SIGTERM, self._handler)
        except ValueError:  # not the main thread: leave SIGTERM alone
            yield
            return
        try:
            yield
        finally:
            signal.signal(signal.SIGTERM, previous)


def _check_cursor(client: Any, chat_id: str, cursor: int) -> None:
    """A given cursor must be a message id the chat has reached: the server skips nothing
    beyond its last message, so a larger one would be reported back as if it were real (and
    would hide a queued turn's answer). A usage error names the chat's last id."""
    page = client.get_messages(chat_id, limit=1)
    newest = max((m.id for m in page.messages), default=0)
    if cursor > newest:
        raise UsageError(
            f"--last-seen-message-id {cursor} is beyond the last message of chat {chat_id} "
            f"({newest}); pass the cursor a previous run printed"
        )
