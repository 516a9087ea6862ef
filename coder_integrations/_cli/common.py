"""What ``coder-agent``'s commands share (``coder_integrations.cli`` and the ``chat`` and
``chats watch`` modules beside this one): the exit statuses, the usage error, the argument
types, the deployment from the flags, the environment or the Coder CLI's stored login,
errors worded with the deployment and the fix, SIGTERM handling, and the connection to a
chat: the client, the cursor check, the model check and the agent."""

from __future__ import annotations

import argparse
import contextlib
import difflib
import math
import os
import signal
import sys
import types
import urllib.parse
from collections.abc import Iterator
from pathlib import Path
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


def coder_config_dir() -> Path:
    """The Coder CLI's configuration folder, where ``coder login`` keeps the deployment
    (``url``) and the session token (``session``): ``$CODER_CONFIG_DIR``, else the user's
    configuration folder's ``coderv2`` (``$XDG_CONFIG_HOME`` or ``~/.config`` on Linux,
    ``~/Library/Application Support`` on macOS, ``%APPDATA%`` on Windows)."""
    given = os.environ.get("CODER_CONFIG_DIR")
    if given:
        return Path(given).expanduser()
    if sys.platform == "darwin":
        base = Path.home() / "Library" / "Application Support"
    elif sys.platform == "win32":
        base = Path(os.environ.get("APPDATA") or Path.home() / "AppData" / "Roaming")
    else:
        base = Path(os.environ.get("XDG_CONFIG_HOME") or Path.home() / ".config")
    return base / "coderv2"


def _stored(name: str) -> str | None:
    """One file of the Coder CLI's stored login, stripped; ``None`` when absent or empty."""
    try:
        text = (coder_config_dir() / name).read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return text or None


def _same_deployment(a: str, b: str) -> bool:
    return a.strip().rstrip("/").lower() == b.strip().rstrip("/").lower()


def _deployment(args: argparse.Namespace) -> tuple[str, str]:
    """The base URL and token from the flags, the environment, or the login ``coder login``
    stored (``coder_config_dir()``); else a usage error. The stored session token is only
    sent to the stored deployment, never to another URL."""
    stored_url = _stored("url")
    url = args.url or os.environ.get("CODER_URL") or stored_url
    if not url:
        raise UsageError(
            "no deployment: pass --url URL, set CODER_URL, or run `coder login URL` (or use --fake)"
        )
    parts = urllib.parse.urlsplit(url.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname:
        if args.url:
            given = f"--url {url}"
        elif os.environ.get("CODER_URL"):
            given = f"CODER_URL={url}"
        else:
            given = f"{coder_config_dir() / 'url'} holds {url}"
        raise UsageError(
            f"{given}: not a deployment URL; give http:// or https:// and a host, "
            "as in https://coder.example.com"
        )
    token = args.token or os.environ.get("CODER_SESSION_TOKEN")
    if not token and stored_url and _same_deployment(stored_url, url):
        token = _stored("session")
    if not token:
        raise UsageError(
            f"no session token for {url}: pass --token TOKEN, set CODER_SESSION_TOKEN, "
            f"or run `coder login {url}`"
        )
    return url, token


def explain(exc: BaseException, url: str | None, *, named: bool = True) -> str:
    """One line for a failure of a request to the deployment at ``url``: where it went and
    what to do for an unreachable deployment (``CoderNetworkError``: refused, unknown host)
    and a refused session token (a 401); otherwise the error's own words, after its class
    name when ``named``."""
    from coder_proto import CoderApiError, CoderNetworkError

    where = url or "the deployment"
    if isinstance(exc, CoderNetworkError):
        return (
            f"cannot reach the Coder deployment at {where} ({exc}); check that it is up and "
            "that --url / CODER_URL is right"
        )
    if isinstance(exc, CoderApiError) and exc.status == 401:
        return (
            f"the Coder deployment at {where} refused the session token (401 Unauthorized); "
            f"set CODER_SESSION_TOKEN (or --token) to a valid token, or run `coder login {where}`"
        )
    return f"{type(exc).__name__}: {exc}" if named else str(exc)


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


def _model(client: Any, hint: str | None, organization_id: str | None) -> str | None:
    """The model config id ``--model HINT`` names on the deployment (a config id is taken as
    it is), or a usage error that lists the close matches: a mistyped model never runs on
    the default one."""
    from coder_proto.adapter import is_model_config_uuid, resolve_model_hint

    if hint is None or is_model_config_uuid(hint):
        return hint
    configs = client.list_model_configs(organization_id)
    found = resolve_model_hint(hint, configs)
    if found is not None:
        return found
    names: dict[str, str] = {}
    for config in configs:
        shown = config.model or config.display_name or config.id
        if config.provider and config.model:
            shown = f"{config.provider}:{config.model}"
        for name in (shown, config.model, config.display_name, config.id):
            if isinstance(name, str) and name:
                names.setdefault(name.lower(), shown)
    close = difflib.get_close_matches(hint.lower(), list(names), n=5, cutoff=0.5)
    suggestions = list(dict.fromkeys(names[name] for name in close))
    known = f"did you mean {', '.join(suggestions)}? " if suggestions else ""
    raise UsageError(
        f"--model {hint}: no model of the deployment matches it; {known}"
        "`coder-agent models` lists them"
    )


def _continue(args: argparse.Namespace, url: str) -> None:
    """``--continue``: the chat and cursor of ``url``'s latest chat in the local log."""
    from . import history

    if args.chat_id is not None:
        raise UsageError("--continue and --chat-id name the chat twice; give one of them")
    entry = history.latest(url)
    if entry is None:
        raise UsageError(
            f"--continue: no earlier chat with {url} in {history.log_path()}; "
            "start one without --continue"
        )
    args.chat_id = entry.chat_id
    if args.last_seen_message_id is None:
        args.last_seen_message_id = entry.last_seen_message_id


def _connect(
    args: argparse.Namespace,
    stack: contextlib.ExitStack,
    progress: Any,
    deployment: tuple[str, str] | None = None,
) -> tuple[Any, str | None]:
    """The command's ``CoderChatClient`` (its transport events shown by ``progress``), closed
    when ``stack`` unwinds, after ``progress`` stops: on an in-process fake server with
    ``--fake`` (started on ``stack``), else on ``deployment`` (the base URL and token;
    ``_deployment(args)`` when not given). ``--continue`` becomes the ``--chat-id`` and
    ``--last-seen-message-id`` of the deployment's latest chat in the log (``_continue``).
    A ``--last-seen-message-id`` given with ``--chat-id`` is checked (``_check_cursor``).
    ``args.deployment_url`` is set to the URL used. Returns the client and the organization
    id: the flag's or the environment's, else the fake server's."""
    from coder_io_sync import CoderChatClient
    from coder_proto import CoderAgentError

    organization_id = _organization_id(args)
    if args.continue_chat and args.fake:
        raise UsageError(
            "--continue takes the last chat of a deployment; the --fake server's chats end "
            "with each command"
        )
    if args.fake:
        from coder_integrations.fake_server import FakeCoderServer

        server = stack.enter_context(FakeCoderServer(chunk_delay=0.01))
        url, token = server.url, server.token
        organization_id = organization_id or server.organization_id
    else:
        url, token = deployment or _deployment(args)
    args.deployment_url = url
    if args.continue_chat:
        _continue(args, url)
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
    (the chat is kept for a resume). A refused setting or a model hint that matches no
    model (``_model``) is a usage error."""
    from coder_io_sync import CoderAgent
    from coder_proto import CoderAgentError

    model = _model(client, args.model, organization_id)
    try:
        agent = CoderAgent(
            client=client,
            organization_id=organization_id,
            model=model,
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
