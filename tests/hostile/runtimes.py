"""Run one public call against a hostile server on each runtime, and observe what escapes.

``call(runtime, url, op, *args, client=..., timeout=...)`` builds a ``CoderChatClient`` of that
runtime (``asyncio``, ``trio`` or ``sync``) on its facade (``tests/runtimes.py``), performs
``op``, closes the client and returns an ``Outcome``: the value or the exception, how long the
call took, and the threads left behind.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable
from typing import Any

import attrs

from coder_proto import CoderAgentError
from tests.runtimes import RUNTIMES as RUNTIME_FACADES
from tests.runtimes import Recorder

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


def _facade(runtime: str) -> Any:
    """The runtime's facade (``tests/runtimes.py``), with a recorder of its own."""
    return RUNTIME_FACADES[runtime](Recorder())


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

    async def scenario(rt: Any) -> None:
        made = rt.client_class(url, token, **kwargs)
        try:
            out.value = await rt.call(made, op, *args, **named)
        except BaseException as exc:
            out.error = exc
        finally:
            out.elapsed = time.monotonic() - start
            if after is not None:
                after(made)
            closing = time.monotonic()
            await rt.close_client(made)
            out.closing = time.monotonic() - closing

    _facade(runtime).run(scenario)
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

    async def scenario(rt: Any) -> None:
        made = rt.agent_class(**kwargs)
        try:
            if timeout is None:
                out.value = await rt.generate(made, prompt)
            else:
                out.value = await rt.bounded(timeout, "generate", made, prompt)
        except BaseException as exc:
            out.error = exc
        finally:
            out.elapsed = time.monotonic() - start
            closing = time.monotonic()
            await rt.close(made, archive=False)
            out.closing = time.monotonic() - closing

    _facade(runtime).run(scenario)
    out.threads_left = _left_behind(before)
    return out


def dispose(runtime: str, url: str, *, agent: dict[str, Any]) -> Outcome:
    """``CoderAgent(...)`` on ``runtime``, closed at once with archiving: ``closing`` is how
    long the close took (it interrupts and archives the agent's chat when it has one)."""
    kwargs: dict[str, Any] = {"base_url": url, "token": TOKEN, **agent}
    before = _threads()
    out = Outcome()
    start = time.monotonic()

    async def scenario(rt: Any) -> None:
        await rt.close(rt.agent_class(**kwargs))

    try:
        _facade(runtime).run(scenario)
    except BaseException as exc:
        out.error = exc
    out.closing = time.monotonic() - start
    out.threads_left = _left_behind(before)
    return out
