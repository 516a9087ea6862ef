"""The flags of ``coder-agent fake-server`` (``command.add_arguments``), declared apart from
the server so that the command line builds its parser (``--help``) without importing it."""

from __future__ import annotations

import argparse
from typing import Final

__all__ = ["DROP_EVENTS", "add_arguments"]

#: Stream event types a drop can come just before (``terminal``: a terminal status).
DROP_EVENTS: Final = (
    "message",
    "message_part",
    "status",
    "error",
    "action_required",
    "retry",
    "queue_update",
    "preview_reset",
    "history_reset",
    "terminal",
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """Declare the command's flags on ``parser``."""
    serve = parser.add_argument_group("serving")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument("--port", default="0", help="port, 0-65535 (default 0: any free port)")
    serve.add_argument("--token", default=None, help="session token (default: random)")
    serve.add_argument(
        "--organization-id", default=None, metavar="UUID", help="organization id (default: random)"
    )
    serve.add_argument(
        "--username", default="fake-user", help="the user's name (default fake-user)"
    )
    serve.add_argument("--seed", default="0", help="seed for ids and random faults (default 0)")
    serve.add_argument(
        "--trace",
        nargs="?",
        const="-",
        default=None,
        metavar="FILE",
        help="write a line per request, upgrade, frame and close to FILE (appended), or to "
        "stderr when no FILE is given; never the token",
    )
    serve.add_argument(
        "--ping-interval", default="15", metavar="SECONDS", help="between WebSocket pings (15)"
    )
    serve.add_argument(
        "--ping-timeout",
        default="15",
        metavar="SECONDS",
        help="close a WebSocket whose pong is this late (15)",
    )

    model = parser.add_argument_group("the model")
    model.add_argument(
        "--scripts",
        metavar="FILE",
        default=None,
        help='JSON script book: {"rules": [{"match": regex, "script": [...]}], "default": [...]}',
    )
    model.add_argument(
        "--models",
        metavar="FILE",
        default=None,
        help='JSON model catalog: [{"model": name, "display_name": ..., "provider": ..., '
        '"is_default": true}, ...]',
    )
    model.add_argument(
        "--chunk-delay", default="0.03", metavar="SECONDS", help="between streamed parts (0.03)"
    )
    model.add_argument(
        "--run-start-delay", default="0", metavar="SECONDS", help="before a run's first part (0)"
    )
    model.add_argument(
        "--interrupt-delay", default="0.2", metavar="SECONDS", help="interrupt wind-down (0.2)"
    )
    model.add_argument(
        "--requires-action-timeout",
        default="300",
        metavar="SECONDS",
        help="before pending client tool calls are cancelled (300)",
    )
    model.add_argument(
        "--retry-base-delay", default="0.01", metavar="SECONDS", help="first provider retry (0.01)"
    )
    model.add_argument(
        "--retry-max-delay", default="0.5", metavar="SECONDS", help="longest provider retry (0.5)"
    )
    model.add_argument(
        "--max-queue", default="20", metavar="N", help="queued messages per chat (20)"
    )
    model.add_argument(
        "--part-buffer-bytes",
        default="1000000",
        metavar="N",
        help="streamed parts kept per generation attempt for late sockets (1000000)",
    )

    profile = parser.add_argument_group("older servers")
    profile.add_argument(
        "--experimental-mount",
        action="store_true",
        help="serve the chat routes under /api/experimental too, as servers of the "
        "compatibility window did (the newest answers 404 there)",
    )
    profile.add_argument(
        "--legacy-only",
        action="store_true",
        help="serve only /api/experimental (an older server); /api/v2 chats answer 404",
    )
    profile.add_argument(
        "--no-promotion-stamps",
        action="store_true",
        help="do not stamp queued_message_id on promoted messages",
    )
    profile.add_argument(
        "--no-coordinates",
        action="store_true",
        help="send message_part deltas without history_version/generation_attempt/seq",
    )
    profile.add_argument(
        "--legacy-envelopes",
        action="store_true",
        help='wrap stream frames as {"type": "data", "data": [...]} with JSON pings',
    )
    profile.add_argument(
        "--envelope-ping-interval",
        default="15",
        metavar="SECONDS",
        help="between the JSON pings of --legacy-envelopes (15)",
    )
    profile.add_argument(
        "--no-zero-value-keys", action="store_true", help='omit "text": "" and the like on parts'
    )
    profile.add_argument(
        "--no-html-escape", action="store_true", help="write <, > and & in JSON strings as is"
    )
    profile.add_argument(
        "--no-message-id-gaps", action="store_true", help="number messages 1, 2, 3 ..."
    )
    profile.add_argument(
        "--allow-unnamed-uploads",
        action="store_true",
        help="accept uploads without a file name",
    )

    faults = parser.add_argument_group(
        "faults",
        "TIMES is how many requests or connections a fault applies to: a number "
        "(default 1) or 'all'. Each flag may be given more than once.",
    )
    faults.add_argument(
        "--drop-after-frames",
        action="append",
        default=[],
        metavar="N[:TIMES]",
        help="end stream connections after N frames (0: right after the upgrade)",
    )
    faults.add_argument(
        "--drop-before",
        action="append",
        default=[],
        metavar="EVENT[:TIMES]",
        help="end stream connections just before their first EVENT ("
        + ", ".join(DROP_EVENTS)
        + "; terminal: a waiting, error or requires_action status)",
    )
    faults.add_argument(
        "--drop-close-code",
        default=None,
        metavar="CODE",
        help="end dropped connections with this WebSocket close code (default: no close frame)",
    )
    faults.add_argument(
        "--drop-probability",
        default="0",
        metavar="P",
        help="end a stream after any frame with probability P, 0-1 (seeded by --seed)",
    )
    faults.add_argument(
        "--reject-upgrades",
        action="append",
        default=[],
        metavar="STATUS[:TIMES]",
        help="answer stream upgrades with STATUS (for example 503, or 429 for a transient one)",
    )
    faults.add_argument(
        "--reject-watch",
        action="append",
        default=[],
        metavar="STATUS[:TIMES]",
        help="answer watch upgrades with STATUS",
    )
    faults.add_argument(
        "--fail-requests",
        action="append",
        default=[],
        metavar="OP:STATUS[:TIMES]",
        help="answer REST operation OP (create_chat_message, archive_chat ... or all) with STATUS",
    )
    faults.add_argument(
        "--delay-requests",
        action="append",
        default=[],
        metavar="OP:SECONDS[:TIMES]",
        help="hold back the answers to OP (or all); TIMES defaults to all",
    )
    faults.add_argument(
        "--delay-frames", default=None, metavar="SECONDS", help="delay every stream frame"
    )
    faults.add_argument(
        "--stall-frames",
        action="append",
        default=[],
        metavar="AFTER:SECONDS[:TIMES]",
        help="after AFTER frames hold a stream's frames back for SECONDS (or forever)",
    )
    faults.add_argument(
        "--stall-runs",
        action="append",
        default=[],
        metavar="SECONDS[:TIMES]",
        help="hold runs in a capacity stall (queued_for_capacity) for SECONDS",
    )
    faults.add_argument(
        "--fail-snapshots",
        default=None,
        metavar="TIMES",
        help="stream connections send only a snapshot error and end",
    )
    faults.add_argument(
        "--history-reset-on-connect",
        action="store_true",
        help="every stream connection starts with history_reset, as after an edit",
    )
    faults.add_argument(
        "--chatd-disabled",
        action="store_true",
        help="answer 503 on every create, mutate and stream route (agents disabled)",
    )
