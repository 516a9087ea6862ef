"""The ``coder-agent`` command line: a dispatcher of subcommands.

Each subcommand is one ``_add_<name>(subparsers)`` function that declares its arguments and
sets ``handler`` to a function ``(args) -> int``; ``main`` parses and dispatches. Add a
command by writing such a function and listing it in ``_COMMANDS``.

Subcommands:

* ``fake-server``: serve a fake Coder deployment on loopback (``coder_proto.fake`` served by
  ``coder_integrations.fake_server``) and print its base URL, session token and organization id
  (as both ``CODER_ORGANIZATION_ID`` and ``CODER_ORG_ID``; ``--env``: as ``export`` lines
  on a stdout closed after them, the banner on stderr).
* ``demo``: one agent turn that streams text live, calls a client tool and heals an injected
  stream drop, then a summary of segments, redials and usage from the transport events. It
  starts the fake server in-process unless ``--url`` or ``CODER_URL`` is given; its failures
  end as ``run``'s do. ``demo`` and ``run`` use the blocking adapter (``coder_io_sync``): no
  event loop, and Ctrl-C interrupts the run.
* ``run PROMPT``: one streaming turn against ``--url`` / ``CODER_URL`` (or ``--fake``),
  printing the text as it arrives and then the chat id and cursor to continue with; ``--json``
  prints one JSON object instead. ``PROMPT`` ``-``, or none with stdin not a terminal, reads
  the prompt from stdin; ``-c`` continues the deployment's latest chat of the local log;
  ``-m`` names the model (one that matches none is a usage error); ``--tools`` loads client
  tools as ``chat`` does. Every way a
  run ends (success, failure, Ctrl-C, SIGTERM, timeout, lost stream, closed stdout) reports the
  chat id and cursor: on stderr in text mode, in the JSON object (``error``, ``chat_id``,
  ``last_seen_message_id``) under ``--json``. Ctrl-C and SIGTERM interrupt the server's run.
* ``chat``: an interactive multi-turn session on one chat, with client tools loaded from a
  Python module (``--tools``), slash commands and Ctrl-C interrupting the turn, not the
  session (``coder_integrations._cli.chat``).
* ``replay FILE``: run a recorded transcript offline and print each turn's outcome.
* ``models``: list the organization's chat model configurations.
* ``chats list | show CHAT_ID | interrupt CHAT_ID | archive CHAT_ID | watch``: the chats on
  the deployment, a chat's history oldest first, interrupting its run, archiving it, and the
  watch stream of their lifecycle events.
* ``log``: the chats ``run`` and ``chat`` reached on a deployment, from the local log
  (``coder_integrations._cli.history``), which ``--continue`` reads too.

The deployment comes from the flags, the ``CODER_*`` variables, or the files ``coder login``
stored (``coder_integrations._cli.common.coder_config_dir``). Mistakes, argument mistakes
included, are one line ``coder-agent COMMAND: ...`` with exit status 2.

On a terminal, ``run`` and ``chat`` show progress on stderr (``coder_integrations._cli.screen``);
docs/cli.md describes every command, flag and exit code.

Exit status (``EXIT_CODES``; the same table ends ``coder-agent --help``):

====  ==========================================================================
0     success
1     the run failed (the server or the model reported an error, the request was
      refused), or a replay did not reproduce its recording
2     usage error: a bad argument or option, missing configuration, a file that
      cannot be read or written
3     the network or the stream was lost and could not be recovered
4     the ``--timeout`` deadline passed (the run was interrupted)
130   interrupted by Ctrl-C (SIGINT); the run was interrupted
141   stdout was closed (a broken pipe, as in ``| head``); the run was interrupted
143   terminated by SIGTERM; the run was interrupted
====  ==========================================================================
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import logging
import os
import sys
from collections.abc import Callable, Sequence
from typing import Any, NoReturn, TextIO

from ._cli.common import (
    EXIT_BROKEN_PIPE,
    EXIT_CODES,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_NETWORK,
    EXIT_OK,
    EXIT_TERMINATED,
    EXIT_TIMEOUT,
    EXIT_USAGE,
    UsageError,
    _agent,
    _connect,
    _cursor,
    _deployment,
    _organization_id,
    _seconds,
    _Signals,
    explain,
)
from ._cli.screen import Printer, Progress

__all__ = ["EXIT_CODES", "build_parser", "main"]


def _exit_epilog() -> str:
    lines = ["exit status:"]
    lines += [f"  {code:<4} {meaning}" for code, meaning in EXIT_CODES.items()]
    return "\n".join(lines)


def _add_deployment_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--url", default=None, help="the Coder deployment's base URL (default: $CODER_URL)"
    )
    parser.add_argument(
        "--token", default=None, help="the session token (default: $CODER_SESSION_TOKEN)"
    )
    parser.add_argument(
        "--organization-id",
        default=None,
        help="(default: $CODER_ORGANIZATION_ID, then $CODER_ORG_ID)",
    )


def _add_agent_arguments(parser: argparse.ArgumentParser) -> None:
    """The flags ``run`` and ``chat`` share: the model, the instructions, the timeout and the
    client tools."""
    parser.add_argument(
        "-m",
        "--model",
        default=None,
        help="model: a config id, provider:model, a model id ... (coder-agent models lists "
        "them); one that matches none is a usage error",
    )
    parser.add_argument(
        "-s",
        "--system",
        "--instructions",
        dest="instructions",
        default=None,
        help="system prompt (instructions) for a new chat",
    )
    parser.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="request_timeout in seconds for each segment (default: none)",
    )
    parser.add_argument(
        "--tools",
        action="append",
        default=[],
        metavar="MODULE",
        help="client tools from a Python module: a .py path or a module name, optionally "
        "MODULE:NAME; its TOOLS list, else its @tool functions (repeatable)",
    )


def _add_fake_server(subparsers: Any) -> None:
    from coder_integrations.fake_server import _flags

    parser = subparsers.add_parser(
        "fake-server",
        help="serve a fake Coder deployment on loopback for tests and demos",
        description=(
            "Serve a fake Coder chat server (REST and WebSocket) until interrupted. It prints "
            "CODER_URL, CODER_SESSION_TOKEN, CODER_ORGANIZATION_ID and CODER_ORG_ID lines you "
            "can export (with --env, as export lines a shell can source). Flags set its "
            "timings, profile, model catalog, scripted answers and injected faults; the "
            "fake-server page of the documentation describes them."
        ),
    )
    _flags.add_arguments(parser)
    parser.add_argument(
        "--env",
        action="store_true",
        help="print only `export NAME=value` lines on stdout, then close it, for "
        "`source <(coder-agent fake-server --env)`; the banner goes to stderr",
    )
    parser.set_defaults(handler=_run_fake_server)


def _run_fake_server(
    args: argparse.Namespace, out: TextIO | None = None, err: TextIO | None = None
) -> int:
    from coder_integrations.fake_server import command

    return command.run(args, out or sys.stdout, err or sys.stderr)


# -- demo and run: one agent turn ----------------------------------------------------------------

_DEMO_PROMPT = "What is the weather in Paris? Use the get_weather tool."
_DEMO_INTRO = "Let me look up the weather in Paris for you."
_DEMO_ANSWER = (
    "The weather service answered {tool_result}. That is a pleasant 21 degrees, mild enough "
    "for a long walk along the Seine, a coffee on a terrace in the Marais, and an evening "
    "picnic on the Champ de Mars while the lights of the tower come on one by one."
)


def _add_demo(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "demo",
        help="one agent turn: live text, a client tool and a healed stream drop",
        description=(
            "Run one CoderAgent turn that streams text, calls a client tool (get_weather) and, "
            "on the built-in fake server, survives an injected stream drop; then print a "
            "summary of segments, redials and usage. Without --url or CODER_URL the fake Coder "
            "server runs in-process; with one (and a session token) the turn runs on that "
            "deployment and its chat is archived afterwards."
        ),
        epilog=_exit_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "--fake",
        action="store_true",
        help="use the in-process fake server even when --url or CODER_URL is given",
    )
    _add_deployment_arguments(parser)
    parser.add_argument(
        "-m", "--model", default=None, help="model for a deployment (coder-agent models)"
    )
    parser.set_defaults(handler=_run_demo)


def _add_run(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run one agent turn and print its text as it streams",
        description=(
            "Send PROMPT as one CoderAgent turn to --url / CODER_URL (with --token / "
            "CODER_SESSION_TOKEN and --organization-id / CODER_ORGANIZATION_ID or CODER_ORG_ID) "
            "or, with --fake, to an in-process fake server. The text streams to stdout; the "
            "chat id and resume cursor follow on stderr, however the run ends. The chat is "
            "kept (not archived) so you can continue it with --chat-id. Ctrl-C and SIGTERM "
            "interrupt the run on the server."
        ),
        epilog=_exit_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "prompt",
        metavar="PROMPT",
        nargs="?",
        default=None,
        help="the user message; - or none (with stdin not a terminal) reads it from stdin",
    )
    parser.add_argument("--fake", action="store_true", help="run against an in-process fake server")
    parser.add_argument(
        "-c",
        "--continue",
        dest="continue_chat",
        action="store_true",
        help="continue the chat this deployment used last (from coder-agent log)",
    )
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (text, finish reason, usage, chat id, cursor, tool calls)",
    )
    parser.add_argument("--chat-id", default=None, help="continue this chat")
    parser.add_argument(
        "--last-seen-message-id",
        type=_cursor,
        default=None,
        help="the resume cursor printed by the previous run (needs --chat-id)",
    )
    _add_deployment_arguments(parser)
    _add_agent_arguments(parser)
    parser.add_argument(
        "--record",
        metavar="FILE",
        default=None,
        help="record the session to FILE as a transcript (JSON lines; see coder-agent replay); "
        "an existing FILE is kept unless --force is given",
    )
    parser.add_argument(
        "--force",
        "--overwrite",
        dest="force",
        action="store_true",
        help="let --record replace an existing file",
    )
    parser.set_defaults(handler=_run_run)


def _weather(city: str) -> dict[str, Any]:
    """Get the current weather for a city."""
    return {"city": city, "temp_c": 21, "conditions": "sunny"}


def _demo_server() -> Any:
    from coder_integrations.fake_server import FakeCoderServer
    from coder_proto.fake import CallClientTool, Say, Script, Think

    server = FakeCoderServer(chunk_delay=0.03, interrupt_delay=0.2)
    server.config.scripts.add(
        "weather",
        Script(
            (
                Think("The user wants the weather in Paris; I will call get_weather."),
                Say(_DEMO_INTRO),
                CallClientTool(name="get_weather", args={"city": "Paris"}),
                Say(_DEMO_ANSWER),
            )
        ),
    )
    # Drop the stream once, in the middle of the answer after the tool result: the agent
    # redials with its original cursor and the text goes on with nothing lost or repeated.
    server.faults.drop_stream_at("message_part", occurrence=45)
    return server


class _Events:
    """Counts the transport events the summary reports."""

    def __init__(self) -> None:
        self.settles: list[Any] = []
        self.redials = 0
        self.dials = 0

    def __call__(self, event: Any) -> None:
        if event.type == "segment:settle":
            self.settles.append(event)
        elif event.type == "ws:redial":
            self.redials += 1
        elif event.type == "ws:dial":
            self.dials += 1


def _usage_line(usage: Any) -> str:
    def n(value: int | None) -> str:
        return "?" if value is None else str(value)

    line = f"input {n(usage.input_tokens)} tokens"
    if usage.cache_read_tokens:
        line += f" ({usage.cache_read_tokens} read from cache)"
    return line + f", output {n(usage.output_tokens)} tokens"


def _run_demo(args: argparse.Namespace, out: TextIO | None = None) -> int:
    """The ``demo`` handler: its failures are worded and numbered as ``run``'s."""
    fake = args.fake or not (args.url or os.environ.get("CODER_URL"))
    signals = _Signals()
    try:
        with signals.installed():
            return _demo(args, out or sys.stdout, fake=fake)
    except (Exception, KeyboardInterrupt) as exc:
        code, kind, message = _classify(exc, signals, getattr(args, "deployment_url", None))
        if kind == "broken_pipe":
            _silence_stdout()
        print(f"coder-agent demo: {message}", file=sys.stderr)
        return code


def _demo(args: argparse.Namespace, out: TextIO, *, fake: bool) -> int:
    import contextlib
    import time

    from coder_io_sync import CoderAgent, CoderChatClient

    from ._cli.common import _model

    events = _Events()
    with contextlib.ExitStack() as stack:
        settings: dict[str, Any] = {"organization_id": _organization_id(args)}
        if fake:
            server = stack.enter_context(_demo_server())
            settings.update(
                base_url=server.url, token=server.token, organization_id=server.organization_id
            )
            print(
                f"Fake Coder server on {server.url} (set CODER_URL to use a deployment)", file=out
            )
        else:
            url, token = _deployment(args)
            args.deployment_url = url
            print(f"Using the Coder deployment at {url}", file=out)
            client = stack.enter_context(CoderChatClient(url, token))
            settings.update(
                client=client, model=_model(client, args.model, settings["organization_id"])
            )
        agent = stack.enter_context(
            CoderAgent(
                **settings,
                instructions="You are a helpful assistant. Use the tools you are given.",
                tools={"get_weather": _weather},
                on_transport_event=events,
                request_timeout=300.0,
            )
        )
        print(f"> {_DEMO_PROMPT}\n", file=out)
        started = time.monotonic()
        printer = Printer(out)
        with agent.stream(_DEMO_PROMPT) as stream:
            for part in stream:
                printer.part(part)
            result = stream.get_final_result()
        printer.finish()
        elapsed = time.monotonic() - started
        steps = ", ".join(
            f"{e.status or '-'}/{e.finish_reason or e.error or '-'}" for e in events.settles
        )
        print("\n--- summary ---", file=out)
        print(f"chat        {result.chat_id}", file=out)
        print(f"segments    {len(events.settles)} ({steps})", file=out)
        injected = "one drop injected mid-answer; " if fake else ""
        print(
            f"redials     {events.redials} ({injected}stream connections: {events.dials}; "
            "every piece of text arrived once, in order)",
            file=out,
        )
        print(f"usage       {_usage_line(result.usage)}", file=out)
        print(f"finish      {result.finish_reason} in {elapsed:.1f} s", file=out)
    return 0


def _silence_stdout() -> None:
    """After a broken pipe: point stdout at /dev/null so that the interpreter's final flush
    does not report the same broken pipe again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


def _classify(
    exc: BaseException, signals: _Signals, url: str | None = None
) -> tuple[int, str, str]:
    """``(exit status, kind, one-line message)`` for the exception that ended a run on the
    deployment at ``url``."""
    from coder_proto import (
        CoderAgentError,
        CoderChatError,
        CoderNetworkError,
        CoderStreamError,
    )

    if isinstance(exc, KeyboardInterrupt):
        if signals.terminated:
            return EXIT_TERMINATED, "terminated", "terminated by SIGTERM; the run was stopped"
        return EXIT_INTERRUPTED, "interrupted", "stopped by Ctrl-C"
    if isinstance(exc, BrokenPipeError):
        return EXIT_BROKEN_PIPE, "broken_pipe", "stdout was closed; the run was interrupted"
    if isinstance(exc, UsageError):
        return EXIT_USAGE, "usage", str(exc)
    kind = getattr(exc, "kind", None) if isinstance(exc, CoderChatError) else None
    if isinstance(exc, TimeoutError) or kind == "timeout":
        return EXIT_TIMEOUT, "timeout", "the --timeout deadline passed; the run was interrupted"
    if isinstance(exc, (CoderNetworkError, CoderStreamError)) or kind == "stream_closed":
        return EXIT_NETWORK, "network", explain(exc, url)
    if isinstance(exc, CoderAgentError):
        return EXIT_FAILED, "failed", explain(exc, url)
    raise exc


class _Session:
    """What a run knows about its chat, for the report printed however the run ends."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.agent: Any = None
        self.printer: Printer | None = None
        self.progress: Progress | None = None
        self.chat_id: str | None = args.chat_id
        self.fake: bool = args.fake
        self.prompt: str | None = None
        # The given cursor is reported back only once the chat confirmed it (_check_cursor).
        self.cursor: int | None = None

    def update(self) -> None:
        if self.agent is not None:
            self.chat_id = self.agent.chat_id or self.chat_id
            cursor = self.agent.last_seen_message_id
            self.cursor = cursor if cursor is not None else self.cursor


def _print_resume(session: _Session) -> None:
    if session.chat_id is None:
        print("no chat was created", file=sys.stderr)
        return
    cursor = session.cursor
    print(f"chat_id={session.chat_id} last_seen_message_id={cursor}", file=sys.stderr)
    if session.fake:
        # The in-process fake server, and the chat with it, ended with the command.
        return
    resume = f"--chat-id {session.chat_id}"
    if cursor is not None:
        resume += f" --last-seen-message-id {cursor}"
    print(f"continue with: coder-agent run {resume} PROMPT", file=sys.stderr)


def _run_run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    out = out or sys.stdout
    session = _Session(args)
    signals = _Signals()
    try:
        with signals.installed():
            code = _run_turn(args, out, session)
    except BaseException as exc:
        if not isinstance(exc, (Exception, KeyboardInterrupt)):
            raise
        code, kind, message = _classify(exc, signals, getattr(args, "deployment_url", None))
        if kind == "broken_pipe":
            _silence_stdout()
        if session.printer is not None:
            session.printer.finish()
        if session.progress is not None:
            session.progress.stop()
        session.update()
        if args.json and kind != "broken_pipe":
            body = {
                "error": message,
                "error_kind": kind,
                "exit_code": code,
                "chat_id": session.chat_id,
                "last_seen_message_id": session.cursor,
            }
            try:
                print(json.dumps(body, ensure_ascii=False), file=out, flush=True)
            except BrokenPipeError:
                _silence_stdout()
                code = EXIT_BROKEN_PIPE
        else:
            print(f"coder-agent run: {message}", file=sys.stderr)
            if kind != "usage":
                _print_resume(session)
    _remember(args, session, "run")
    return code


def _remember(args: argparse.Namespace, session: _Session, command: str) -> None:
    """Add the session's chat to the local log (``coder-agent log``, ``--continue``), on a
    deployment only."""
    url = getattr(args, "deployment_url", None)
    if session.fake or url is None or session.chat_id is None:
        return
    from ._cli import history

    history.append(
        chat_id=session.chat_id,
        deployment=url,
        prompt=session.prompt or "",
        last_seen_message_id=session.cursor,
        command=command,
    )


def _prompt(args: argparse.Namespace) -> str:
    """``PROMPT``; ``-`` or none reads stdin, unless stdin is a terminal (then no PROMPT is a
    usage error rather than a wait for typed text)."""
    from ._cli.screen import is_terminal

    if args.prompt is None and is_terminal(sys.stdin):
        raise UsageError("no PROMPT: give one, or pipe it on stdin (echo hi | coder-agent run)")
    if args.prompt not in (None, "-"):
        return str(args.prompt)
    try:
        text = sys.stdin.read()
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise UsageError(f"cannot read the prompt from stdin: {exc}") from None
    if not text.strip():
        raise UsageError("the prompt read from stdin is empty")
    # The newline that ends a piped line (`echo hi | coder-agent run -`) is not the prompt's.
    return text.removesuffix("\n")


def _open_record(path: str, force: bool) -> TextIO:
    """Open the --record file: refuse a directory, a missing folder, and (unless --force) an
    existing file, each with a one-line message."""
    if os.path.isdir(path):
        raise UsageError(f"--record {path}: is a directory; give a file name")
    folder = os.path.dirname(path) or "."
    if not os.path.isdir(folder):
        raise UsageError(f"--record {path}: the folder {folder} does not exist")
    try:
        return open(path, "w" if force else "x", encoding="utf-8")
    except FileExistsError:
        raise UsageError(f"--record {path}: the file exists; pass --force to replace it") from None
    except OSError as exc:
        raise UsageError(f"--record {path}: {exc.strerror or exc}") from None


def _result_json(result: Any) -> dict[str, Any]:
    from coder_proto.adapter import encode_output

    usage = result.usage
    return {
        "text": result.text,
        "finish_reason": result.finish_reason,
        "usage": {
            "input_tokens": usage.input_tokens,
            "output_tokens": usage.output_tokens,
            "total_tokens": usage.total_tokens,
            "cache_read_tokens": usage.cache_read_tokens,
            "cache_write_tokens": usage.cache_write_tokens,
            "reasoning_tokens": usage.reasoning_tokens,
        },
        "chat_id": result.chat_id,
        "last_seen_message_id": result.last_seen_message_id,
        "tool_calls": [
            {
                "tool_call_id": call.tool_call_id,
                "tool_name": call.tool_name,
                "input": call.input,
                "provider_executed": call.provider_executed,
            }
            for step in result.steps
            for call in step.tool_calls
        ],
        "tool_results": [
            {
                "tool_call_id": r.tool_call_id,
                "tool_name": r.tool_name,
                "result": encode_output(r.result),
                "is_error": r.is_error,
            }
            for step in result.steps
            for r in step.tool_results
        ],
        "sources": [{"id": s.id, "url": s.url, "title": s.title} for s in result.sources],
        "error": None if result.error is None else str(result.error),
    }


def _run_turn(args: argparse.Namespace, out: TextIO, session: _Session) -> int:
    from ._cli.tools import ToolsError, load_tools

    if args.last_seen_message_id is not None and args.chat_id is None and not args.continue_chat:
        raise UsageError("--last-seen-message-id needs --chat-id (or --continue)")
    prompt = session.prompt = _prompt(args)
    try:
        tools = load_tools(args.tools)
    except ToolsError as exc:
        raise UsageError(str(exc)) from None
    deployment = None if args.fake else _deployment(args)
    with contextlib.ExitStack() as stack:
        recorder = None
        if args.record:
            from coder_proto.transcript import TranscriptRecorder

            # Opened first, closed last: background cleanup is still recorded.
            transcript = stack.enter_context(_open_record(args.record, args.force))
            recorder = TranscriptRecorder(transcript.write)
        # Progress on a terminal only, and never under --json.
        progress = session.progress = Progress(sys.stderr, enabled=False if args.json else None)
        # The client (not the agent) is closed at the end: the chat is kept for a resume.
        client, organization_id = _connect(args, stack, progress, deployment)
        session.chat_id = args.chat_id
        if args.chat_id is not None and args.last_seen_message_id is not None:
            session.cursor = args.last_seen_message_id
        agent = session.agent = _agent(
            args, stack, client, organization_id, progress, recorder=recorder, tools=tools
        )
        if args.json:
            result = agent.generate(prompt)
            session.update()
            print(json.dumps(_result_json(result), ensure_ascii=False), file=out, flush=True)
        else:
            printer = session.printer = Printer(out, aside=sys.stderr, progress=progress)
            progress.start()
            with agent.stream(prompt) as stream:
                for part in stream:
                    printer.part(part)
                result = stream.get_final_result()
            printer.finish()
            progress.finished("done")
            session.update()
            if result.error is not None:
                print(f"coder-agent run: the run failed: {result.error}", file=sys.stderr)
            _print_resume(session)
        return EXIT_FAILED if result.finish_reason == "error" else EXIT_OK


def _add_replay(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a recorded transcript offline and print the outcome",
        description=(
            "Run a transcript recorded with `coder-agent run --record FILE` (or an agent's "
            "recorder=) through the core offline, without any network, and print each turn's "
            "outcome: text, reasoning, tool calls, usage, finish reason, error, and whether it "
            "matches the recorded one. Replay is deterministic. The exit status is 1 when "
            "the replay diverged from the recording, 2 when FILE is not a transcript."
        ),
    )
    parser.add_argument("file", metavar="FILE", help="the transcript (JSON lines)")
    parser.add_argument("--parts", action="store_true", help="print every output part")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.set_defaults(handler=_run_replay)


def _run_replay(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from coder_proto import CoderAgentError
    from coder_proto.transcript import parse_transcript, replay

    out = out or sys.stdout
    try:
        with open(args.file, encoding="utf-8") as f:
            result = replay(parse_transcript(f))
    except OSError as exc:
        print(
            f"coder-agent replay: cannot read {args.file}: {exc.strerror or exc}", file=sys.stderr
        )
        return EXIT_USAGE
    except (CoderAgentError, ValueError) as exc:
        reason = "it is not text" if isinstance(exc, UnicodeDecodeError) else str(exc)
        print(f"coder-agent replay: {args.file} is not a transcript: {reason}", file=sys.stderr)
        return EXIT_USAGE
    code = EXIT_OK if result.faithful else EXIT_FAILED
    if args.json:
        print(json.dumps(result.to_json(parts=args.parts), ensure_ascii=False), file=out)
        return code
    for number, turn in enumerate(result.turns, 1):
        summary = turn.summary()
        print(f"turn {number} ({turn.mode})", file=out)
        if args.parts:
            for part in turn.parts:
                print("  " + json.dumps(part.to_dict(), ensure_ascii=False, default=repr), file=out)
        error = summary.get("error")
        if "text" in summary:
            print(f"  text: {summary['text']}", file=out)
            if summary["reasoning"]:
                print(f"  reasoning: {summary['reasoning']}", file=out)
            for call in summary["tool_calls"]:
                print(f"  tool call: {call['tool_name']}({call['input']})", file=out)
            print(f"  finish reason: {summary['finish_reason']}", file=out)
            usage = summary.get("usage") or {}
            print(
                f"  usage: input {usage.get('input_tokens')}, output {usage.get('output_tokens')},"
                f" total {usage.get('total_tokens')}",
                file=out,
            )
        if error:
            print(f"  error: {error['type']}: {error['message']}", file=out)
        match = {True: "yes", False: "NO", None: "nothing recorded"}[turn.matches_recording]
        print(f"  matches the recording: {match}", file=out)
    for divergence in result.divergences:
        print(f"divergence: {divergence}", file=out)
    if not result.turns:
        print("no turns in this transcript", file=out)
    if code != EXIT_OK:
        print(f"coder-agent replay: {args.file} did not replay as recorded", file=sys.stderr)
    return code


# -- models and chats: plain operations on a deployment -------------------------------------------


def _add_models(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "models",
        help="list the organization's chat model configurations",
        description=(
            "List the chat model configurations of the organization (--organization-id, "
            "CODER_ORGANIZATION_ID or CODER_ORG_ID) on --url / CODER_URL: id, provider/model, "
            "display name; the default is marked with *. An id is what run --model takes."
        ),
        epilog=_exit_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    _add_deployment_arguments(parser)
    parser.add_argument("--json", action="store_true", help="print one JSON array")
    parser.set_defaults(handler=_run_models)


def _add_chats(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "chats",
        help="list chats, show a chat's history, interrupt or archive a chat, watch them",
        description=(
            "Manage the chats on --url / CODER_URL: `chats list`, `chats show CHAT_ID`, "
            "`chats interrupt CHAT_ID`, `chats archive CHAT_ID`, `chats watch`."
        ),
        epilog=_exit_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    listing = actions.add_parser("list", help="list the chats that are not archived")
    listing.add_argument("--query", default=None, help="the server's search query (q=)")
    listing.add_argument(
        "--limit", type=_count, default=None, help="at most this many chats (default: all)"
    )
    show = actions.add_parser("show", help="print a chat's messages, oldest first")
    watch = actions.add_parser(
        "watch",
        help="print the chats' lifecycle events as they happen, until Ctrl-C or --timeout",
        description=(
            "Print one line per event of the watch stream of the user's chats (kind, chat "
            "id, status, title; the pending tool calls of action_required), until Ctrl-C "
            "(exit 130) or --timeout SECONDS (exit 0). Lost connections are redialed."
        ),
    )
    watch.add_argument(
        "--timeout",
        type=_seconds,
        default=None,
        metavar="SECONDS",
        help="stop watching after SECONDS (default: until Ctrl-C)",
    )
    interrupt = actions.add_parser("interrupt", help="interrupt the chat's running turn")
    archive = actions.add_parser("archive", help="archive the chat")
    for action in (show, interrupt, archive):
        action.add_argument("chat_id", metavar="CHAT_ID")
    for action in (listing, show, interrupt, archive, watch):
        _add_deployment_arguments(action)
        action.add_argument("--json", action="store_true", help="print JSON")
    parser.set_defaults(handler=_run_chats)


def _count(text: str) -> int:
    """An argparse type: a whole number, 1 or more."""
    try:
        value = int(text.strip())
    except ValueError:
        value = 0
    if value < 1:
        raise argparse.ArgumentTypeError(f"takes a whole number, 1 or more, got {text!r}")
    return value


def _operation(name: str, args: argparse.Namespace, body: Callable[[Any], int]) -> int:
    """Run ``body(client)`` against the deployment; a failure is one line and its exit code."""
    from coder_io_sync import CoderChatClient
    from coder_proto import CoderAgentError, CoderNetworkError

    url: str | None = None
    try:
        url, token = _deployment(args)
        args.deployment_url = url
        try:
            client = CoderChatClient(url, token)
        except CoderAgentError as exc:
            raise UsageError(str(exc)) from None
        with client:
            return body(client)
    except UsageError as exc:
        print(f"coder-agent {name}: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    except CoderNetworkError as exc:
        print(f"coder-agent {name}: {explain(exc, url)}", file=sys.stderr)
        return EXIT_NETWORK
    except CoderAgentError as exc:
        print(f"coder-agent {name}: {explain(exc, url, named=False)}", file=sys.stderr)
        return EXIT_FAILED


def _run_models(args: argparse.Namespace, out: TextIO | None = None) -> int:
    stream = out or sys.stdout

    def body(client: Any) -> int:
        organization_id = _organization_id(args)
        if not organization_id:
            raise UsageError("no organization: pass --organization-id or set CODER_ORGANIZATION_ID")
        configs = client.list_model_configs(organization_id)
        if args.json:
            rows = [
                {
                    "id": c.id,
                    "provider": c.provider,
                    "model": c.model,
                    "display_name": c.display_name,
                    "is_default": bool(c.is_default),
                    "enabled": c.enabled,
                    "context_limit": c.context_limit,
                    "reasoning_efforts": list(c.reasoning_efforts),
                }
                for c in configs
            ]
            print(json.dumps(rows, ensure_ascii=False), file=stream, flush=True)
            return EXIT_OK
        for c in configs:
            mark = "*" if c.is_default else " "
            disabled = "" if c.enabled is not False else "  [disabled]"
            name = f"{c.provider or '?'}:{c.model or '?'}"
            print(f"{mark} {c.id}  {name}  {c.display_name or ''}{disabled}", file=stream)
        if not configs:
            print("no model configurations", file=stream)
        stream.flush()
        return EXIT_OK

    return _operation("models", args, body)


def _chat_row(chat: Any) -> dict[str, Any]:
    return {
        "id": chat.id,
        "title": chat.title,
        "status": chat.status,
        "updated_at": chat.updated_at,
        "archived": chat.archived,
    }


def _part_line(part: Any) -> str:
    kind = getattr(part, "type", "?")
    if kind == "text":
        return str(part.text)
    if kind == "reasoning":
        return f"(thinking) {part.text}"
    if kind == "tool-call":
        args = getattr(part, "args", None)
        shown = json.dumps(args, ensure_ascii=False, default=repr) if args is not None else ""
        return f"[tool call] {part.tool_name}({shown})"
    if kind == "tool-result":
        result = json.dumps(getattr(part, "result", None), ensure_ascii=False, default=repr)
        error = " (error)" if part.is_error else ""
        return f"[tool result{error}] {part.tool_name}: {result}"
    if kind == "source":
        return f"[source] {getattr(part, 'url', '')}"
    return f"[{kind}]"


def _run_chats(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from coder_proto import CoderAgentError, CoderApiError

    stream = out or sys.stdout

    def body(client: Any) -> int:
        if args.action == "list":
            chats = client.list_chats(q=args.query, limit=args.limit)
            if args.json:
                rows = [_chat_row(c) for c in chats]
                print(json.dumps(rows, ensure_ascii=False), file=stream)
            else:
                for chat in chats:
                    print(
                        f"{chat.id}  {chat.status:<15} {chat.updated_at}  {chat.title}", file=stream
                    )
                if not chats:
                    print("no chats", file=stream)
        elif args.action == "show":
            messages: list[Any] = []
            before: int | None = None
            while True:
                page = client.get_messages(args.chat_id, before_id=before)
                messages.extend(page.messages)
                if not page.has_more or not page.messages:
                    break
                before = min(m.id for m in page.messages)
            messages.sort(key=lambda m: m.id)
            if args.json:
                rows = [
                    {"id": m.id, "role": m.role, "content": [p.to_json() for p in m.content]}
                    for m in messages
                ]
                print(json.dumps(rows, ensure_ascii=False, default=repr), file=stream)
            else:
                for m in messages:
                    print(f"[{m.id}] {m.role}:", file=stream)
                    for part in m.content:
                        print(f"  {_part_line(part)}", file=stream)
        elif args.action == "watch":
            from ._cli.watch import watch_chats

            return watch_chats(client, args, stream)
        elif args.action == "interrupt":
            try:
                chat = client.interrupt_chat(args.chat_id)
            except CoderApiError as exc:
                if exc.status == 409:
                    raise CoderAgentError(
                        f"chat {args.chat_id} has no running turn to interrupt"
                    ) from None
                raise
            if args.json:
                print(json.dumps(_chat_row(chat), ensure_ascii=False), file=stream)
            else:
                print(f"interrupted {chat.id} (status {chat.status})", file=stream)
        else:
            outcome = client.archive_chat(args.chat_id)
            if args.json:
                print(json.dumps({"id": args.chat_id, "outcome": str(outcome)}), file=stream)
            else:
                print(f"{args.chat_id}: {outcome}", file=stream)
        stream.flush()
        return EXIT_OK

    return _operation(f"chats {args.action}", args, body)


def _add_chat(subparsers: Any) -> None:
    from ._cli import chat

    parser = subparsers.add_parser(
        "chat",
        help="an interactive multi-turn session on one chat",
        description=(
            "Chat with the agent on --url / CODER_URL (or --fake): each line you type is one "
            "turn of the same chat, its answer streamed. Commands: "
            + "; ".join(f"{name} {meaning}" for name, meaning in chat.COMMANDS.items())
            + ". Ctrl-C interrupts the running turn on the server and the session goes on; "
            "Ctrl-D ends the session and prints the chat id and cursor to continue it."
        ),
        epilog=_exit_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    chat.add_arguments(parser)
    _add_agent_arguments(parser)
    _add_deployment_arguments(parser)
    parser.set_defaults(handler=_run_chat)


def _run_chat(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from ._cli.chat import run_chat

    return run_chat(args, out)


def _add_log(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "log",
        help="list the chats run and chat reached, from the local log",
        description=(
            "List the chats `run` and `chat` reached on a deployment, the latest last: id, "
            "time of the first session (UTC), deployment, first prompt. The log is "
            "$XDG_DATA_HOME/coder-agents/chats.jsonl (~/.local/share when unset); --continue "
            "reads it too. Runs on --fake are not logged."
        ),
        epilog=_exit_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument(
        "-n", "--limit", type=_count, default=None, help="the last N chats (default: all)"
    )
    parser.add_argument("--url", default=None, help="only this deployment's chats")
    parser.add_argument("--json", action="store_true", help="print one JSON array")
    parser.set_defaults(handler=_run_log)


def _run_log(args: argparse.Namespace, out: TextIO | None = None) -> int:
    import dataclasses

    from ._cli import history

    stream = out or sys.stdout
    entries = history.chats(args.url)
    if args.limit is not None:
        entries = entries[-args.limit :]
    try:
        if args.json:
            rows = [dataclasses.asdict(entry) for entry in entries]
            print(json.dumps(rows, ensure_ascii=False), file=stream, flush=True)
            return EXIT_OK
        for entry in entries:
            prompt = " ".join(entry.prompt.split())
            prompt = prompt if len(prompt) <= 60 else prompt[:59] + "\u2026"
            print(f"{entry.chat_id}  {entry.time}  {entry.deployment}  {prompt}", file=stream)
        if not entries:
            print(f"no chats in {history.log_path()}", file=sys.stderr)
        stream.flush()
    except BrokenPipeError:
        _silence_stdout()
        return EXIT_BROKEN_PIPE
    return EXIT_OK


#: Subcommand registrations, in help order.
_COMMANDS: list[Callable[[Any], None]] = [
    _add_fake_server,
    _add_demo,
    _add_run,
    _add_chat,
    _add_replay,
    _add_models,
    _add_chats,
    _add_log,
]


class _Parser(argparse.ArgumentParser):
    """Argument mistakes in the form of every other mistake: one line on stderr,
    ``coder-agent COMMAND: ...``, then where the flags are listed; exit status 2."""

    def error(self, message: str) -> NoReturn:
        sys.stderr.write(f"{self.prog}: {message} (`{self.prog} --help` lists the flags)\n")
        sys.exit(EXIT_USAGE)


def build_parser() -> argparse.ArgumentParser:
    """The ``coder-agent`` parser with every registered subcommand."""
    from coder_proto import __version__

    parser = _Parser(
        prog="coder-agent",
        description="Coder Agents client tools.",
        epilog=_exit_epilog(),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"coder-agent {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in _COMMANDS:
        add(subparsers)
    return parser


#: The loggers of the library (docs/logging.md).
_LIBRARY_LOGGERS = ("coder_proto", "coder_io_sync", "coder_io_common", "coder_integrations")


def _library_logs() -> None:
    """The command reports redials, failures and tool errors in its own words, so the
    library's log records are not printed as well, unless ``CODER_AGENT_LOG`` names a level
    (``DEBUG``, ``INFO``, ``WARNING``, ``ERROR``): then they go to stderr from that level up. A
    program that configured logging itself keeps its configuration."""
    wanted = os.environ.get("CODER_AGENT_LOG", "").strip().upper()
    if logging.getLogger().handlers:
        return
    level = logging.getLevelName(wanted) if wanted else None
    if isinstance(level, int):
        logging.basicConfig(
            level=level, stream=sys.stderr, format="%(levelname)s %(name)s: %(message)s"
        )
        return
    for name in _LIBRARY_LOGGERS:
        logger = logging.getLogger(name)
        if not any(isinstance(h, logging.NullHandler) for h in logger.handlers):
            logger.addHandler(logging.NullHandler())


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``coder-agent`` script; returns the exit status."""
    for stream in (sys.stdout, sys.stderr):
        # Streamed text can hold a lone surrogate (a JSON "\ud800" from the server): print it
        # as that escape rather than fail mid-turn.
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    _library_logs()
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra:
        command = f"coder-agent {args.command}" if args.command else "coder-agent"
        print(
            f"{command}: unrecognized arguments: {' '.join(extra)} "
            f"(`{command} --help` lists the flags)",
            file=sys.stderr,
        )
        return EXIT_USAGE
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    result: int = handler(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
