"""The ``coder-agent`` command line: a dispatcher of subcommands.

Each subcommand is one ``_add_<name>(subparsers)`` function that declares its arguments and
sets ``handler`` to a function ``(args) -> int``; ``main`` parses and dispatches. Add a
command by writing such a function and listing it in ``_COMMANDS``.

Subcommands:

* ``fake-server``: serve a fake Coder deployment on loopback (``coder_proto.fake`` served by
  ``coder_io_asyncio.fake_server``) and print its base URL, session token and organization id.
* ``demo``: one agent turn that streams text live, calls a client tool and heals an injected
  stream drop, then a summary of segments, redials and usage from the transport events. It
  starts the fake server in-process unless ``CODER_URL`` is set. ``demo`` and ``run`` use the
  blocking adapter (``coder_io_sync``): no event loop, and Ctrl-C interrupts the run.
* ``run PROMPT``: one streaming turn against ``CODER_URL`` (or ``--fake``), printing the text
  as it arrives and then the chat id and cursor to continue with; ``--json`` prints one JSON
  object instead.
"""

from __future__ import annotations

import argparse
import io
import json
import sys
from collections.abc import Callable, Sequence
from typing import Any, TextIO

__all__ = ["build_parser", "main"]


def _add_fake_server(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "fake-server",
        help="serve a fake Coder deployment on loopback for tests and demos",
        description=(
            "Serve a fake Coder chat server (REST and WebSocket) until interrupted. It prints "
            "CODER_URL, CODER_SESSION_TOKEN and CODER_ORGANIZATION_ID lines you can export."
        ),
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=0, help="port (default: any free port)")
    parser.add_argument("--token", default=None, help="session token (default: random)")
    parser.add_argument("--seed", type=int, default=0, help="seed for ids and random faults")
    parser.add_argument(
        "--chunk-delay",
        type=float,
        default=0.03,
        help="seconds between streamed parts (default 0.03)",
    )
    parser.add_argument(
        "--interrupt-delay", type=float, default=0.2, help="interrupt wind-down in seconds"
    )
    parser.add_argument(
        "--requires-action-timeout",
        type=float,
        default=300.0,
        help="seconds before pending client tool calls are cancelled (default 300)",
    )
    parser.add_argument(
        "--legacy-only",
        action="store_true",
        help="serve only /api/experimental (an older server); /api/v2 answers 404",
    )
    parser.add_argument(
        "--no-promotion-stamps",
        action="store_true",
        help="do not stamp queued_message_id on promoted messages (older servers)",
    )
    parser.add_argument(
        "--no-coordinates",
        action="store_true",
        help="send message_part deltas without history_version/generation_attempt/seq",
    )
    parser.add_argument(
        "--legacy-envelopes",
        action="store_true",
        help='wrap stream frames as {"type": "data", "data": [...]} with JSON pings (very old servers)',
    )
    parser.add_argument(
        "--scripts",
        metavar="FILE",
        default=None,
        help='JSON script book: {"rules": [{"match": regex, "script": [...]}], "default": [...]}',
    )
    parser.set_defaults(handler=_run_fake_server)


def _run_fake_server(args: argparse.Namespace, out: TextIO = sys.stdout) -> int:
    import asyncio

    from coder_io_asyncio.fake_server import FakeCoderServer
    from coder_proto.fake import FakeConfig, ScriptBook, ScriptError

    config = FakeConfig(
        seed=args.seed,
        chunk_delay=args.chunk_delay,
        interrupt_delay=args.interrupt_delay,
        requires_action_timeout=args.requires_action_timeout,
        legacy_only=args.legacy_only,
        stamp_promotions=not args.no_promotion_stamps,
        coordinates=not args.no_coordinates,
        legacy_envelopes=args.legacy_envelopes,
    )
    if args.scripts:
        try:
            with open(args.scripts, encoding="utf-8") as handle:
                config.scripts = ScriptBook.from_json(json.load(handle))
        except (OSError, ValueError, ScriptError) as exc:
            print(f"coder-agent fake-server: cannot load {args.scripts}: {exc}", file=sys.stderr)
            return 2
    server = FakeCoderServer(host=args.host, port=args.port, token=args.token, config=config)

    def ready(srv: FakeCoderServer) -> None:
        print(f"Fake Coder server listening on {srv.url} (Ctrl-C to stop)", file=out)
        print(f"CODER_URL={srv.url}", file=out)
        print(f"CODER_SESSION_TOKEN={srv.token}", file=out)
        print(f"CODER_ORGANIZATION_ID={srv.organization_id}", file=out)
        out.flush()

    try:
        asyncio.run(server.serve_forever(ready))
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        print(f"coder-agent fake-server: {exc}", file=sys.stderr)
        return 1
    return 0


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
            "summary of segments, redials and usage. Without CODER_URL the fake Coder server "
            "runs in-process; with CODER_URL (and CODER_SESSION_TOKEN, CODER_ORGANIZATION_ID) "
            "the turn runs on that deployment and its chat is archived afterwards."
        ),
    )
    parser.add_argument(
        "--fake",
        action="store_true",
        help="use the in-process fake server even when CODER_URL is set",
    )
    parser.add_argument("--organization-id", default=None, help="(default: $CODER_ORGANIZATION_ID)")
    parser.add_argument("--model", default=None, help="model hint for a real deployment")
    parser.set_defaults(handler=_run_demo)


def _add_run(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "run",
        help="run one agent turn and print its text as it streams",
        description=(
            "Send PROMPT as one CoderAgent turn to CODER_URL (with CODER_SESSION_TOKEN and "
            "CODER_ORGANIZATION_ID) or, with --fake, to an in-process fake server. The text "
            "streams to stdout; the chat id and resume cursor follow on stderr. The chat is "
            "kept (not archived) so you can continue it with --chat-id."
        ),
    )
    parser.add_argument("prompt", metavar="PROMPT", help="the user message")
    parser.add_argument("--fake", action="store_true", help="run against an in-process fake server")
    parser.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object (text, finish reason, usage, chat id, cursor, tool calls)",
    )
    parser.add_argument("--chat-id", default=None, help="continue this chat")
    parser.add_argument(
        "--last-seen-message-id",
        type=int,
        default=None,
        help="the resume cursor printed by the previous run (needs --chat-id)",
    )
    parser.add_argument("--organization-id", default=None, help="(default: $CODER_ORGANIZATION_ID)")
    parser.add_argument("--model", default=None, help="model hint: config id, provider:model ...")
    parser.add_argument("--instructions", default=None, help="system prompt for a new chat")
    parser.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="request_timeout in seconds for each segment (default: none)",
    )
    parser.add_argument(
        "--record",
        metavar="FILE",
        default=None,
        help="record the session to FILE as a transcript (JSON lines; see coder-agent replay)",
    )
    parser.set_defaults(handler=_run_run)


def _weather(city: str) -> dict[str, Any]:
    """Get the current weather for a city."""
    return {"city": city, "temp_c": 21, "conditions": "sunny"}


def _demo_server() -> Any:
    from coder_io_asyncio.fake_server import FakeCoderServer
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


class _Printer:
    """Prints a live stream: text to ``out`` as it comes; reasoning and tool calls on lines of
    their own, to ``aside`` when given (so that ``out`` carries only the text)."""

    def __init__(self, out: TextIO, aside: TextIO | None = None) -> None:
        self.out = out
        self.aside = aside or out
        self._last: dict[int, str] = {}

    def _write(self, stream: TextIO, kind: str, text: str, prefix: str = "") -> None:
        last = self._last.get(id(stream))
        if last != kind or kind == "tool":
            if last is not None:
                stream.write("\n")
            stream.write(prefix)
        stream.write(text)
        stream.flush()
        self._last[id(stream)] = kind

    def part(self, part: Any) -> None:
        from coder_proto import ReasoningDelta, TextDelta, ToolCall

        kind = type(part)
        if kind is TextDelta:
            self._write(self.out, "text", part.delta)
        elif kind is ReasoningDelta:
            self._write(self.aside, "reasoning", part.delta, "(thinking) ")
        elif kind is ToolCall:
            where = "server" if part.provider_executed else "client"
            self._write(self.aside, "tool", f"[{where} tool call] {part.tool_name}({part.input})")

    def finish(self) -> None:
        """End the open lines."""
        for stream in {id(self.out): self.out, id(self.aside): self.aside}.values():
            if self._last.get(id(stream)) is not None:
                stream.write("\n")
                stream.flush()
        self._last.clear()


def _usage_line(usage: Any) -> str:
    def n(value: int | None) -> str:
        return "?" if value is None else str(value)

    line = f"input {n(usage.input_tokens)} tokens"
    if usage.cache_read_tokens:
        line += f" ({usage.cache_read_tokens} read from cache)"
    return line + f", output {n(usage.output_tokens)} tokens"


def _run_demo(args: argparse.Namespace, out: TextIO | None = None) -> int:
    import os

    from coder_proto import CoderAgentError

    fake = args.fake or not os.environ.get("CODER_URL")
    try:
        return _demo(args, out or sys.stdout, fake=fake)
    except KeyboardInterrupt:
        return 130
    except CoderAgentError as exc:
        print(f"coder-agent demo: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _demo(args: argparse.Namespace, out: TextIO, *, fake: bool) -> int:
    import contextlib
    import time

    from coder_io_sync import CoderAgent

    events = _Events()
    with contextlib.ExitStack() as stack:
        settings: dict[str, Any] = {"organization_id": args.organization_id, "model": args.model}
        if fake:
            server = stack.enter_context(_demo_server())
            settings.update(
                base_url=server.url, token=server.token, organization_id=server.organization_id
            )
            print(
                f"Fake Coder server on {server.url} (set CODER_URL to use a deployment)", file=out
            )
        else:
            print("Using the Coder deployment at $CODER_URL", file=out)
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
        printer = _Printer(out)
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


def _run_run(args: argparse.Namespace, out: TextIO | None = None) -> int:
    from coder_proto import CoderAgentError

    try:
        return _run_turn(args, out or sys.stdout)
    except KeyboardInterrupt:
        return 130
    except CoderAgentError as exc:
        print(f"coder-agent run: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


def _result_json(result: Any) -> dict[str, Any]:
    from coder_proto._agent.tools import encode_output

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
    }


def _run_turn(args: argparse.Namespace, out: TextIO) -> int:
    import contextlib

    from coder_io_sync import CoderAgent, CoderChatClient

    with contextlib.ExitStack() as stack:
        recorder = None
        if getattr(args, "record", None):
            from coder_proto.transcript import TranscriptRecorder

            # Opened first, closed last: background cleanup is still recorded.
            transcript = stack.enter_context(open(args.record, "w", encoding="utf-8"))
            recorder = TranscriptRecorder(transcript.write)
        organization_id = args.organization_id
        if args.fake:
            from coder_io_asyncio.fake_server import FakeCoderServer

            server = stack.enter_context(FakeCoderServer(chunk_delay=0.01))
            client = CoderChatClient(server.url, server.token)
            organization_id = organization_id or server.organization_id
        else:
            client = CoderChatClient()
        # The client (not the agent) is closed at the end: the chat is kept for a resume.
        stack.enter_context(client)
        agent = CoderAgent(
            client=client,
            organization_id=organization_id,
            model=args.model,
            instructions=args.instructions,
            request_timeout=args.timeout,
            chat_id=args.chat_id,
            last_seen_message_id=args.last_seen_message_id,
            recorder=recorder,
        )
        if args.json:
            result = agent.generate(args.prompt)
            print(json.dumps(_result_json(result), ensure_ascii=False), file=out)
        else:
            printer = _Printer(out, aside=sys.stderr)
            with agent.stream(args.prompt) as stream:
                for part in stream:
                    printer.part(part)
                result = stream.get_final_result()
            printer.finish()
            if result.error is not None:
                print(f"coder-agent run: the run failed: {result.error}", file=sys.stderr)
            cursor = result.last_seen_message_id
            print(f"chat_id={result.chat_id} last_seen_message_id={cursor}", file=sys.stderr)
            resume = f"--chat-id {result.chat_id}"
            if cursor is not None:
                resume += f" --last-seen-message-id {cursor}"
            print(f"continue with: coder-agent run {resume} PROMPT", file=sys.stderr)
        return 1 if result.finish_reason == "error" else 0


def _add_replay(subparsers: Any) -> None:
    parser = subparsers.add_parser(
        "replay",
        help="replay a recorded transcript offline and print the outcome",
        description=(
            "Run a transcript recorded with `coder-agent run --record FILE` (or an agent's "
            "recorder=) through the core offline, without any network, and print each turn's "
            "outcome: text, reasoning, tool calls, usage, finish reason, error, and whether it "
            "matches the recorded one. Replay is deterministic."
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
        print(f"coder-agent replay: cannot read {args.file}: {exc.strerror}", file=sys.stderr)
        return 1
    except CoderAgentError as exc:
        print(f"coder-agent replay: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(result.to_json(parts=args.parts), ensure_ascii=False), file=out)
        return 0
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
    return 0


#: Subcommand registrations, in help order.
_COMMANDS: list[Callable[[Any], None]] = [_add_fake_server, _add_demo, _add_run, _add_replay]


def build_parser() -> argparse.ArgumentParser:
    """The ``coder-agent`` parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="coder-agent", description="Coder Agents client tools.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in _COMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``coder-agent`` script; returns the exit status."""
    for stream in (sys.stdout, sys.stderr):
        # Streamed text can hold a lone surrogate (a JSON "\ud800" from the server): print it
        # as that escape rather than fail mid-turn.
        if isinstance(stream, io.TextIOWrapper):
            stream.reconfigure(errors="backslashreplace")
    parser = build_parser()
    args = parser.parse_args(argv)
    handler = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    result: int = handler(args)
    return result


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
