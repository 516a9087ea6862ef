"""``coder-agent chats watch``: the watch stream of the user's chats, one line (or one JSON
object) per event, until Ctrl-C (exit 130) or ``--timeout`` (exit 0)."""

from __future__ import annotations

import argparse
import json
import sys
import threading
from typing import Any, TextIO

from . import common

__all__ = ["watch_chats"]


def _line(event: Any) -> str:
    chat = event.chat
    line = f"{event.kind:<16} {chat.id}  {chat.status:<15} {chat.title}"
    if event.tool_calls:
        calls = ", ".join(call.tool_name for call in event.tool_calls)
        line += f"  [waiting for {calls}]"
    return line


def _json(event: Any) -> str:
    chat = event.chat
    body = {
        "kind": event.kind,
        "chat_id": chat.id,
        "status": chat.status,
        "title": chat.title,
        "archived": chat.archived,
        "tool_calls": [
            {"tool_call_id": call.tool_call_id, "tool_name": call.tool_name}
            for call in event.tool_calls
        ],
    }
    return json.dumps(body, ensure_ascii=False)


def watch_chats(client: Any, args: argparse.Namespace, out: TextIO) -> int:
    """Print the events of ``client.watch_chats()`` until Ctrl-C or ``args.timeout``; a line
    on stderr says the watch started, and how it ends."""

    expired = threading.Event()
    with client.watch_chats() as watch:
        url = getattr(args, "deployment_url", None) or "the deployment"
        until = f"for {args.timeout:g} s" if args.timeout is not None else "until Ctrl-C"
        print(f"watching the chats on {url} {until}", file=sys.stderr, flush=True)
        timer = None
        if args.timeout is not None:

            def stop() -> None:
                expired.set()
                watch.close()

            timer = threading.Timer(args.timeout, stop)
            timer.daemon = True
            timer.start()
        try:
            for event in watch:
                print(_json(event) if args.json else _line(event), file=out, flush=True)
                if expired.is_set():
                    break
        except KeyboardInterrupt:
            return common.EXIT_INTERRUPTED
        except Exception:
            if not expired.is_set():
                raise
        finally:
            if timer is not None:
                timer.cancel()
    return common.EXIT_OK
