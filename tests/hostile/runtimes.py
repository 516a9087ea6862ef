"""Run one public call against a hostile server on each runtime, and observe what escapes.

``call(runtime, url, op, *args, client=..., timeout=...)`` builds a ``CoderChatClient`` of that
runtime (``asyncio``, ``trio`` or ``sync``), performs ``op``, closes the client and returns an
``Outcome``: the value or the exception, how long the call took, and the threads left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs
import trio

import coder_io_asyncio
import coder_io_sync
import coder_io_trio
from coder_proto import CoderAgentError

RUNTIMES = ("asyncio", "trio", "sync")

TOKEN = "hostile-secret-token-0123456789"
PREFIX = "/api/experimental/chats"

#: What may escape a call: the library's errors, or the runtime's own deadline.
ALLOWED = (CoderAgentError, TimeoutError)


@attrs.define
class Outcome:
    value: Any = None
    error: BaseException | None = None
    elapsed: float = 0.0
    #: How long closing the client (or agent) took after the call.
    closing: float = 0.0
    threads_left: list[str] = attrs.Factory(list)


def open_sockets() -> int:
    """Sockets this process holds open (Linux: ``/proc/self/fd``; 0 elsewhere)."""
    try:
        names = os.listdir("/proc/self/fd")
    except OSError:  # pragma: no cover - not Linux
        return 0
    count = 0
    for name in names:
        with contextlib.suppress(OSError):
            if os.readlink(f"/proc/self/fd/{name}").startswith("socket:"):
                count += 1
    return count


def _threads() -> set[threading.Thread]:
    return set(threading.enumerate())


def _left_behind(before: set[threading.Thread]) -> list[str]:
    """The threads started since ``before`` still alive after a moment for them to end."""
    end = time.monotonic() + 2.0
    left: list[threading.Thread] = []
    while time.monotonic() < end:
        left = [t for t in _threads() - before if t.is_alive() and not t.name.startswith("hostile")]
        if not left:
            break
        time.sleep(0.02)
    return [t.name for t in left]


def call(
    runtime: str,
    url: str,
    op: str,
    *args: Any,
    client: dict[str, Any] | None = None,
    after: Callable[[Any], None] | None = None,
    options: dict[str, Any] | None = None,
    token: str = TOKEN,
) -> Outcome:
    """Perform ``client.<op>(*args, **options)`` on ``runtime``; ``after(client)`` runs
    before close."""
    kwargs: dict[str, Any] = {"prefix": PREFIX, **(client or {})}
    named = options or {}
    before = _threads()
    out = Outcome()
    start = time.monotonic()
    if runtime == "sync":
        sync_client = coder_io_sync.CoderChatClient(url, token, **kwargs)
        try:
            out.value = getattr(sync_client, op)(*args, **named)
        except BaseException as exc:
            out.error = exc
        finally:
            out.elapsed = time.monotonic() - start
            if after is not None:
                after(sync_client)
            closing = time.monotonic()
            sync_client.close()
            out.closing = time.monotonic() - closing
    else:
        module: Any = coder_io_asyncio if runtime == "asyncio" else coder_io_trio

        async def run() -> None:
            async_client = module.CoderChatClient(url, token, **kwargs)
            try:
                out.value = await getattr(async_client, op)(*args, **named)
            except BaseException as exc:
                out.error = exc
            finally:
                out.elapsed = time.monotonic() - start
                if after is not None:
                    after(async_client)
                closing = time.monotonic()
                await async_client.aclose()
                out.closing = time.monotonic() - closing

        if runtime == "asyncio":
            asyncio.run(run())
        else:
            trio.run(run)
    # Threads the client started must be gone once it is closed (a moment for them to end).
    out.threads_left = _left_behind(before)
    return out


def generate(
    runtime: str,
    url: str,
    prompt: str,
    *,
    agent: dict[str, Any],
    timeout: float | None = None,
) -> Outcome:
    """``CoderAgent(...).generate(prompt)`` on ``runtime``, then close (without archiving).
    ``timeout`` is the caller's own deadline: ``generate(timeout=)`` on the blocking adapter,
    ``asyncio.timeout`` and ``trio.fail_after`` on the event loops."""
    kwargs: dict[str, Any] = {"base_url": url, "token": TOKEN, **agent}
    before = _threads()
    out = Outcome()
    start = time.monotonic()
    if runtime == "sync":
        sync_agent = coder_io_sync.CoderAgent(**kwargs)
        try:
            if timeout is None:
                out.value = sync_agent.generate(prompt)
            else:
                out.value = sync_agent.generate(prompt, timeout=timeout)
        except BaseException as exc:
            out.error = exc
        finally:
            out.elapsed = time.monotonic() - start
            closing = time.monotonic()
            sync_agent.close(archive=False)
            out.closing = time.monotonic() - closing
    else:
        module: Any = coder_io_asyncio if runtime == "asyncio" else coder_io_trio

        async def run() -> None:
            async_agent = module.CoderAgent(**kwargs)
            try:
                if timeout is None:
                    out.value = await async_agent.generate(prompt)
                elif runtime == "asyncio":
                    async with asyncio.timeout(timeout):
                        out.value = await async_agent.generate(prompt)
                else:
                    with trio.fail_after(timeout):
                        out.value = await async_agent.generate(prompt)
            except BaseException as exc:
                out.error = exc
            finally:
                out.elapsed = time.monotonic() - start
                closing = time.monotonic()
                await async_agent.aclose(archive=False)
                out.closing = time.monotonic() - closing

        if runtime == "asyncio":
            asyncio.run(run())
        else:
            trio.run(run)
    out.threads_left = _left_behind(before)
    return out


def dispose(runtime: str, url: str, *, agent: dict[str, Any]) -> Outcome:
    """``CoderAgent(...)`` on ``runtime``, closed at once with archiving: ``closing`` is how
    long the close took (it interrupts and archives the agent's chat when it has one)."""
    kwargs: dict[str, Any] = {"base_url": url, "token": TOKEN, **agent}
    before = _threads()
    out = Outcome()
    start = time.monotonic()
    try:
        if runtime == "sync":
            coder_io_sync.CoderAgent(**kwargs).close()
        else:
            module: Any = coder_io_asyncio if runtime == "asyncio" else coder_io_trio

            async def run() -> None:
                await module.CoderAgent(**kwargs).aclose()

            if runtime == "asyncio":
                asyncio.run(run())
            else:
                trio.run(run)
    except BaseException as exc:
        out.error = exc
    out.closing = time.monotonic() - start
    out.threads_left = _left_behind(before)
    return out
