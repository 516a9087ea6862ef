"""What ``coder-agent``'s commands share (``coder_io_sync.cli`` and the ``chat`` and
``chats watch`` modules beside this one): the exit statuses, the usage error, the argument
types, the deployment from the flags or the environment, SIGTERM handling, and the
connection to a chat: the client, the cursor check and the agent."""

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


def _connect(
    args: argparse.Namespace,
    stack: contextlib.ExitStack,
    progress: Any,
    deployment: tuple[str, str] | None = None,
) -> tuple[Any, str | None]:
    """The command's ``CoderChatClient`` (its transport events shown by ``progress``), closed
    when ``stack`` unwinds, after ``progress`` stops: on an in-process fake server with
    ``--fake`` (started on ``stack``), else on ``deployment`` (the base URL and token;
    ``_deployment(args)`` when not given). A ``--last-seen-message-id`` given with
    ``--chat-id`` is checked (``_check_cursor``). Returns the client and the organization id:
    the flag's or the environment's, else the fake server's."""
    from coder_io_sync import CoderChatClient
    from coder_proto import CoderAgentError

    organization_id = _organization_id(args)
    if args.fake:
        from coder_io_common.fake_server import FakeCoderServer

        server = stack.enter_context(FakeCoderServer(chunk_delay=0.01))
        url, token = server.url, server.token
        organization_id = organization_id or server.organization_id
    else:
        url, token = deployment or _deployment(args)
    try:
        client = CoderChatClient(url, token, on_transport_event=progress)
    except CoderAgentError as exc:
        raise UsageError(str(exc)) from None
    stack.enter_context(client)
    stack.callback(progress.stop)
    if args.chat_id is not None and args.last_seen_message_id is not None:
        _check_cursor(client, args.chat_id, args.last_seen_message_id)
    return client, organization_id


def _agent(
    args: argparse.Namespace,
    stack: contextlib.ExitStack,
    client: Any,
    organization_id: str | None,
    progress: Any,
    **options: Any,
) -> Any:
    """The ``CoderAgent`` of the command's flags (``--model``, ``--instructions``,
    ``--timeout``, ``--chat-id``, ``--last-seen-message-id``) on ``client``, with
    ``options`` (``tools``, ``recorder``); closed without archiving when ``stack`` unwinds
    (the chat is kept for a resume). A refused setting is a usage error."""
    from coder_io_sync import CoderAgent
    from coder_proto import CoderAgentError

    try:
        agent = CoderAgent(
            client=client,
            organization_id=organization_id,
            model=args.model,
            instructions=args.instructions,
            request_timeout=args.timeout,
            chat_id=args.chat_id,
            last_seen_message_id=args.last_seen_message_id,
            on_transport_event=progress,
            **options,
        )
    except CoderAgentError as exc:
        raise UsageError(str(exc)) from None
    stack.callback(agent.close, archive=False)
    return agent
