"""``coder-agent fake-server``: its flags, and serving until interrupted.

Every ``FakeConfig`` knob and every kind of injected fault has a flag; ``--trace`` writes a
line per request, upgrade and frame. A flag with a bad value ends the command with one line
on stderr naming the flag and what it takes (exit status 2), before anything is served.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import re
import shlex
from collections.abc import Callable
from contextlib import ExitStack
from typing import Any, Final, TextIO

from coder_proto.fake import (
    OPERATIONS,
    FakeConfig,
    FakeConfigError,
    Faults,
    ScriptBook,
    models_from_json,
)

from ._flags import DROP_EVENTS as _DROP_EVENTS
from ._flags import add_arguments as add_arguments
from ._server import FakeCoderServer

__all__ = ["add_arguments", "run", "server_from_args"]

_UUID: Final = re.compile(r"^[0-9a-fA-F]{8}-([0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}$")


# -- values -----------------------------------------------------------------------------------


def _int(flag: str, text: str, low: int, high: int | None = None, what: str = "") -> int:
    what = what or (
        f"a whole number from {low} to {high}"
        if high is not None
        else f"a whole number of at least {low}"
    )
    try:
        value = int(text.strip())
    except ValueError:
        raise FakeConfigError(f"{flag} takes {what}, got {text!r}") from None
    if value < low or (high is not None and value > high):
        raise FakeConfigError(f"{flag} takes {what}, got {text!r}")
    return value


def _seconds(flag: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value < 0:
        raise FakeConfigError(f"{flag} takes a number of seconds, 0 or more, got {text!r}")
    return value


def _times(flag: str, text: str | None, default: int | None = 1) -> int | None:
    if text is None or text == "":
        return default
    if text.strip().lower() == "all":
        return None
    return _int(flag, text, 1, what="a count of at least 1 or 'all'")


def _status(flag: str, text: str) -> int:
    return _int(flag, text, 100, 599, "an HTTP status from 100 to 599")


def _fields(flag: str, text: str, shape: str, least: int, most: int) -> list[str]:
    parts = text.split(":")
    if not least <= len(parts) <= most or any(p.strip() == "" for p in parts[:least]):
        raise FakeConfigError(f"{flag} takes {shape}, got {text!r}")
    return parts + [""] * (most - len(parts))


def _op(flag: str, text: str) -> str:
    op = text.strip()
    if op == "all":
        return "*"
    if op not in OPERATIONS:
        raise FakeConfigError(
            f"{flag}: unknown operation {op!r} (one of {', '.join(sorted(OPERATIONS))}, or all)"
        )
    return op


def _load_json(flag: str, path: str) -> Any:
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise FakeConfigError(f"{flag}: cannot load {path}: {reason}") from None


# -- building the server ----------------------------------------------------------------------


def _config(args: argparse.Namespace) -> FakeConfig:
    config = FakeConfig(
        seed=_int("--seed", args.seed, 0, what="a whole number, 0 or more"),
        username=args.username,
        chunk_delay=_seconds("--chunk-delay", args.chunk_delay),
        run_start_delay=_seconds("--run-start-delay", args.run_start_delay),
        interrupt_delay=_seconds("--interrupt-delay", args.interrupt_delay),
        requires_action_timeout=_seconds("--requires-action-timeout", args.requires_action_timeout),
        retry_base_delay=_seconds("--retry-base-delay", args.retry_base_delay),
        retry_max_delay=_seconds("--retry-max-delay", args.retry_max_delay),
        max_queue=_int("--max-queue", args.max_queue, 1, what="a count of at least 1"),
        part_buffer_bytes=_int(
            "--part-buffer-bytes", args.part_buffer_bytes, 0, what="a number of bytes, 0 or more"
        ),
        experimental_mount=args.experimental_mount,
        legacy_only=args.legacy_only,
        stamp_promotions=not args.no_promotion_stamps,
        coordinates=not args.no_coordinates,
        legacy_envelopes=args.legacy_envelopes,
        envelope_ping_interval=_seconds("--envelope-ping-interval", args.envelope_ping_interval),
        zero_value_keys=not args.no_zero_value_keys,
        html_escape=not args.no_html_escape,
        message_id_gaps=not args.no_message_id_gaps,
        require_upload_filename=not args.allow_unnamed_uploads,
    )
    if not args.username.strip():
        raise FakeConfigError("--username must not be empty")
    if args.organization_id is not None:
        if _UUID.match(args.organization_id) is None:
            raise FakeConfigError(f"--organization-id takes a UUID, got {args.organization_id!r}")
        config.organization_id = args.organization_id.lower()
    if args.scripts:
        try:
            config.scripts = ScriptBook.from_json(_load_json("--scripts", args.scripts))
        except FakeConfigError as exc:
            raise FakeConfigError(f"--scripts: cannot load {args.scripts}: {exc}") from None
    if args.models:
        try:
            config.models = models_from_json(_load_json("--models", args.models))
        except FakeConfigError as exc:
            raise FakeConfigError(f"--models: cannot load {args.models}: {exc}") from None
    return config


def _faults(args: argparse.Namespace, seed: int) -> Faults:
    faults = Faults(seed=seed)
    close_code = None
    if args.drop_close_code is not None:
        close_code = _int(
            "--drop-close-code",
            args.drop_close_code,
            1000,
            4999,
            "a WebSocket close code from 1000 to 4999",
        )
    for text in args.drop_after_frames:
        frames, times = _fields("--drop-after-frames", text, "N[:TIMES]", 1, 2)
        faults.drop_stream_after_frames(
            _int("--drop-after-frames", frames, 0, what="a number of frames, 0 or more"),
            _times("--drop-after-frames", times),
            close_code=close_code,
        )
    for text in args.drop_before:
        event, times = _fields("--drop-before", text, "EVENT[:TIMES]", 1, 2)
        if event not in _DROP_EVENTS:
            raise FakeConfigError(
                f"--drop-before: unknown event {event!r} (one of {', '.join(_DROP_EVENTS)})"
            )
        count = _times("--drop-before", times)
        if event == "terminal":
            faults.close_before_terminal_status(count, close_code=close_code)
        else:
            faults.drop_stream_at(event, times=count, close_code=close_code)
    probability = _float_between("--drop-probability", args.drop_probability)
    if probability:
        faults.drop_streams_randomly(probability)
    for flag, texts, route in (
        ("--reject-upgrades", args.reject_upgrades, "stream"),
        ("--reject-watch", args.reject_watch, "watch"),
    ):
        for text in texts:
            status, times = _fields(flag, text, "STATUS[:TIMES]", 1, 2)
            faults.reject_upgrades(_status(flag, status), _times(flag, times), route=route)
    for text in args.fail_requests:
        op, status, times = _fields("--fail-requests", text, "OP:STATUS[:TIMES]", 2, 3)
        faults.fail_requests(
            _op("--fail-requests", op),
            _status("--fail-requests", status),
            _times("--fail-requests", times),
        )
    for text in args.delay_requests:
        op, seconds, times = _fields("--delay-requests", text, "OP:SECONDS[:TIMES]", 2, 3)
        faults.delay_requests(
            _op("--delay-requests", op),
            _seconds("--delay-requests", seconds),
            _times("--delay-requests", times, default=None),
        )
    if args.delay_frames is not None:
        faults.delay_frames(_seconds("--delay-frames", args.delay_frames))
    for text in args.stall_frames:
        after, seconds, times = _fields("--stall-frames", text, "AFTER:SECONDS[:TIMES]", 2, 3)
        faults.stall_frames(
            _int("--stall-frames", after, 0, what="a number of frames, 0 or more"),
            None if seconds.strip() == "forever" else _seconds("--stall-frames", seconds),
            _times("--stall-frames", times),
        )
    for text in args.stall_runs:
        seconds, times = _fields("--stall-runs", text, "SECONDS[:TIMES]", 1, 2)
        faults.stall_runs(_seconds("--stall-runs", seconds), _times("--stall-runs", times))
    if args.fail_snapshots is not None:
        faults.fail_snapshots(_times("--fail-snapshots", args.fail_snapshots))
    faults.history_reset_on_connect = args.history_reset_on_connect
    faults.chatd_disabled = args.chatd_disabled
    return faults


def _float_between(flag: str, text: str) -> float:
    try:
        value = float(text.strip())
    except ValueError:
        value = math.nan
    if not 0.0 <= value <= 1.0:
        raise FakeConfigError(f"{flag} takes a probability from 0 to 1, got {text!r}")
    return value


def _trace_sink(path: str | None, err: TextIO, stack: ExitStack) -> Callable[[str], None] | None:
    if path is None:
        return None
    if path == "-":
        return lambda line: print(line, file=err, flush=True)
    try:
        handle = stack.enter_context(open(path, "a", encoding="utf-8", buffering=1))  # noqa: SIM115
    except OSError as exc:
        raise FakeConfigError(f"--trace: cannot write {path}: {exc.strerror or exc}") from None
    return lambda line: print(line, file=handle)


def server_from_args(args: argparse.Namespace, err: TextIO, stack: ExitStack) -> FakeCoderServer:
    """The server the flags describe (not started). A trace file is opened on ``stack``;
    ``FakeConfigError`` names the first flag whose value is unusable."""
    config = _config(args)
    faults = _faults(args, config.seed)
    port = _int("--port", args.port, 0, 65535, "a port from 0 to 65535")
    ping_interval = _seconds("--ping-interval", args.ping_interval)
    ping_timeout = _seconds("--ping-timeout", args.ping_timeout)
    if ping_interval <= 0 or ping_timeout <= 0:
        raise FakeConfigError("--ping-interval and --ping-timeout take a number of seconds above 0")
    return FakeCoderServer(
        host=args.host,
        port=port,
        token=args.token,
        config=config,
        faults=faults,
        ping_interval=ping_interval,
        ping_timeout=ping_timeout,
        trace=_trace_sink(args.trace, err, stack),
    )


def _close_stdout(out: TextIO) -> None:
    """After the ``--env`` lines: end the output, so that a shell reading it
    (``source <(...)``) goes on while the server keeps serving."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, out.fileno())
    finally:
        os.close(devnull)


def run(args: argparse.Namespace, out: TextIO, err: TextIO) -> int:
    """Serve until interrupted; the exit status (2: a bad flag, 1: cannot listen)."""

    exports = getattr(args, "env", False)

    def ready(srv: FakeCoderServer) -> None:
        banner = f"Fake Coder server listening on {srv.url} (Ctrl-C to stop)"
        print(banner, file=err if exports else out, flush=True)
        prefix = "export " if exports else ""
        for name, value in (
            ("CODER_URL", srv.url),
            ("CODER_SESSION_TOKEN", srv.token),
            ("CODER_ORGANIZATION_ID", srv.organization_id),
            ("CODER_ORG_ID", srv.organization_id),
        ):
            print(f"{prefix}{name}={shlex.quote(value) if exports else value}", file=out)
        out.flush()
        if exports:
            _close_stdout(out)

    with ExitStack() as stack:
        try:
            server = server_from_args(args, err, stack)
        except FakeConfigError as exc:
            print(f"coder-agent fake-server: {exc}", file=err)
            return 2
        try:
            asyncio.run(server.serve_forever(ready))
        except KeyboardInterrupt:
            pass
        except OSError as exc:
            where = f"{args.host}:{args.port}"
            print(
                f"coder-agent fake-server: cannot listen on {where}: {exc.strerror or exc}",
                file=err,
            )
            return 1
    return 0
