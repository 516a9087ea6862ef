"""The ``coder-agent`` command line: a dispatcher of subcommands.

Each subcommand is one ``_add_<name>(subparsers)`` function that declares its arguments and
sets ``handler`` to a function ``(args) -> int``; ``main`` parses and dispatches. Add a
command by writing such a function and listing it in ``_COMMANDS``.

Subcommands:

* ``fake-server``: serve a fake Coder deployment on loopback (``coder_proto.fake`` served by
  ``coder_io_asyncio.fake_server``) and print its base URL, session token and organization id.
"""

from __future__ import annotations

import argparse
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


#: Subcommand registrations, in help order.
_COMMANDS: list[Callable[[Any], None]] = [_add_fake_server]


def build_parser() -> argparse.ArgumentParser:
    """The ``coder-agent`` parser with every registered subcommand."""
    parser = argparse.ArgumentParser(prog="coder-agent", description="Coder Agents client tools.")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND")
    for add in _COMMANDS:
        add(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``coder-agent`` script; returns the exit status."""
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
