"""Benchmark 3, end to end: the fake server (its own process) streams the transcript over
loopback; the client consumes ``agent.stream(prompt).text_stream`` on each runtime. The floor
is ``_agent.bare_turn``: one plain HTTP request to create the chat, then a socket, wsproto and
``json.loads`` until the terminal status.

Both sides are timed from the chat's creation to the end of the turn, alternating, in one
process. ``ratio`` is the median CPU-time ratio (the client's own cost: the server's pace,
which bounds both, is not the client's); ``extra.wall_ratio`` is the wall-clock one. Target:
at most 1.5x on every runtime.

``e2e.core.asyncio`` runs the core's ``StreamReader`` and ``TurnTranslator`` on a minimal
asyncio driver against the same floor: the cost of the protocol core over a real socket,
measurable before (and apart from) the adapters.

What is left above the floor (profiled on a 20,000-delta turn with orjson installed, and on
the quick run's 5,000-delta one; the same on every runtime unless said otherwise):

* the core, which is most of it: decoding each frame into typed events (the floor decodes
  and walks plain dicts), the replay filter, and the translator's ledger; ``e2e.core.asyncio``
  measures this share alone (1.1x to 1.2x in quick runs). Its cost per delta is the core
  benchmark's (``core.frames.*``), not the adapters';
* per delta, one generator step in the adapter: ``text_stream`` drains the run's parts
  inline (on asyncio and trio one async generator step per delta, on the blocking adapter
  one generator step and a lock-free ``popleft``);
* per turn, creating the chat through httpx: about 2 ms of CPU on a new client against about
  0.3 ms for the floor's ``http.client`` request, some 0.1x of a quick run's 5,000-delta turn
  (about 17 ms of CPU on the floor) and nothing much at the full size. The agent's other
  request, archiving the chat, comes after the timed turn;
* per socket read, the driver's pump: the connection machine settles its jobs and re-arms
  its one timer (a few microseconds per read, so it weighs only when reads are small);
* asyncio: per read, the event loop's wake-up and the stream reader's copy of the bytes it
  buffered (``asyncio.StreamReader``); a protocol of our own would save the copy and a future
  per read;
* trio: per read, a trio checkpoint (``receive_some`` parks the task, the scheduler wakes
  it), which costs more than asyncio's callback; and a second task per socket, the writer,
  idle while the turn streams;
* blocking: no event loop; per readiness, a ``poll`` on the socket and the wake pipe, then up
  to sixteen reads, each handed to the core as it is read (the driver held them all until the
  last before, a megabyte at worst), and the driver's condition notified for waiting readers.
  A fast stream is read in few, full readinesses (about 40 reads for 5,000 deltas), so what
  it costs per read is small beside the core's; it is the most sensitive to a loaded machine,
  where the reader runs in the same thread as the consumer.

Per delta, what the adapters add is a generator step and a ``popleft``, about 0.1 us (some 3%
of a quick run's turn); per read, the pump and the wake-up, a few percent more.
The rest of the distance to the floor is the core's, per frame (``e2e.core.asyncio``), and the
session's turn around it (segment, connection, ledger), which no runtime changes.
"""

from __future__ import annotations

import statistics
from typing import Any

from ._agent import (
    RUNTIMES,
    ServerProcess,
    agent_class,
    bare_turn,
    core_turn_asyncio,
    make_agent,
    require_fake_server,
    run_on,
    stream_turn,
    timed,
)
from ._common import BenchSkipped, Result, Settings, skipped
from ._server import transcript_texts

__all__ = ["E2E_TARGET", "run"]

E2E_TARGET = 1.5


def _floor(info: dict[str, Any]) -> dict[str, Any]:
    with timed() as t:
        chars = bare_turn(info)
    return {**t, "chars": chars}


def _rounds(runtime: str, cls: Any, info: dict[str, Any], rounds: int) -> list[dict[str, Any]]:
    """Alternating floor / client turns; the first pair is a warm-up and is dropped.
    ``cls`` ``None`` runs the core stand-in (``core_turn_asyncio``) on asyncio."""
    rows: list[dict[str, Any]] = []

    if runtime == "sync":

        def main_sync() -> list[dict[str, Any]]:
            for i in range(rounds + 1):
                f = _floor(info) if i % 2 == 0 else None
                stats: dict[str, int] = {}
                with make_agent(cls, info) as agent, timed() as t:
                    chars = stream_turn(runtime, agent, stats=stats)
                f = f or _floor(info)
                streamed = stats.get("deltas", 0) > 1
                rows.append({"floor": f, "client": {**t, "chars": chars, "streamed": streamed}})
            return rows

        return run_on(runtime, main_sync)[1:]  # type: ignore[no-any-return]

    async def main_async() -> list[dict[str, Any]]:
        for i in range(rounds + 1):
            f = _floor(info) if i % 2 == 0 else None
            stats: dict[str, Any] = {}
            if cls is None:
                with timed() as t:
                    chars = await core_turn_asyncio(info, marks=stats)
                streamed = "first_delta_cpu" in stats
            else:
                async with make_agent(cls, info) as agent:
                    with timed() as t:
                        chars = await stream_turn(runtime, agent, stats=stats)
                streamed = stats.get("deltas", 0) > 1
            f = f or _floor(info)
            rows.append({"floor": f, "client": {**t, "chars": chars, "streamed": streamed}})
        return rows

    return run_on(runtime, main_async)[1:]  # type: ignore[no-any-return]


def _result(
    name: str, n: int, rows: list[dict[str, Any]], text_chars: int, extra: dict[str, Any]
) -> Result:
    # A round counts when both sides saw the turn as streamed deltas: on a loaded machine a
    # side can dial after the fake's run ended and receive only the committed snapshot.
    wrong = [r for r in rows if r["client"]["chars"] != text_chars]
    valid = [
        r
        for r in rows
        if r["client"]["streamed"] and r["floor"]["chars"] == text_chars and r["floor"]["cpu"] > 0
    ]
    if not valid:
        return skipped(name, n, "no round streamed on both sides (the fake ran ahead)")
    total, rows = len(rows), valid
    cpu = [r["client"]["cpu"] / r["floor"]["cpu"] for r in rows]
    wall = [r["client"]["wall"] / r["floor"]["wall"] for r in rows]
    ratio = statistics.median(cpu)
    return Result(
        name,
        n,
        statistics.median(r["client"]["wall"] for r in rows),
        statistics.median(r["floor"]["wall"] for r in rows),
        ratio,
        {
            "target": f"<= {E2E_TARGET}x (CPU)",
            "meets_target": ratio <= E2E_TARGET and not wrong,
            "wall_ratio": statistics.median(wall),
            "client_cpu_s": statistics.median(r["client"]["cpu"] for r in rows),
            "floor_cpu_s": statistics.median(r["floor"]["cpu"] for r in rows),
            "rounds": len(rows),
            "rounds_dropped": total - len(rows),
            "text_chars": text_chars,
            "wrong_text_rounds": len(wrong),
            "clock": "ratio: process_time; value_s/floor_s: wall",
            **extra,
        },
    )


def run(settings: Settings) -> list[Result]:
    """One result per runtime (``e2e.asyncio``, ``e2e.trio``, ``e2e.sync``), and
    ``e2e.core.asyncio``: the core's reader and translator on a minimal asyncio driver."""
    n = settings.e2e_n
    require_fake_server()
    _, text = transcript_texts(n)
    out: list[Result] = []
    classes: dict[str, Any] = {}
    for runtime in RUNTIMES:
        try:
            classes[runtime] = agent_class(runtime)
        except BenchSkipped as exc:
            out.append(skipped(f"e2e.{runtime}", n, str(exc)))
    with ServerProcess(n) as server:
        rows = _rounds("asyncio", None, server.info, settings.e2e_rounds)
        out.append(
            _result(
                "e2e.core.asyncio",
                n,
                rows,
                len(text),
                {
                    "via": "StreamReader + TurnTranslator on asyncio streams (no CoderAgent)",
                },
            )
        )
        for runtime, cls in classes.items():
            name = f"e2e.{runtime}"
            try:
                rows = _rounds(runtime, cls, server.info, settings.e2e_rounds)
            except BenchSkipped as exc:
                out.append(skipped(name, n, str(exc)))
                continue
            except Exception as exc:  # the adapter under test failed: report it, go on
                out.append(skipped(name, n, f"failed: {type(exc).__name__}: {exc}"))
                continue
            out.append(_result(name, n, rows, len(text), {"runtime": runtime}))
    return out
