"""Benchmark 5, fleet: many concurrent chats in one process.

* ``fleet.asyncio.memory`` / ``fleet.trio.memory``: agents sharing one client each open a
  stream against the fake server (one process of its own) and wait, open and idle (the fake
  starts the runs later), until all are open: the traced Python heap per open chat
  (tracemalloc; target: at most 16 KiB), at the largest size (10,000 chats in a full run; the
  quick run's size is in the line's ``n`` and note). RSS growth per chat is kept beside it
  (``extra.rss_bytes_per_chat``: it counts the socket buffers tracemalloc misses, and is
  noisy). ``value_s`` is the time to open them all. The judged figure counts each chat's
  consumer task (the benchmark's, as a user's service has its own): ``extra`` says what as
  many bare anyio tasks waiting on an event take (``consumer_task_bytes_per_chat``) and the
  library's share without them (``library_bytes_per_chat``). A chat whose turn ended before
  the sample holds almost nothing, and a redialed stream's second open is counted as
  another chat's: the line counts the chats streaming when it was taken
  (``streaming_at_sample_by_size``) and the redialed opens (``redialed_opens_by_size``), and
  is not judged if any chat had ended or any stream was redialed.
* ``fleet.asyncio.cpu`` / ``fleet.trio.cpu``: then all of them stream their ``deltas``
  deltas at once; the same at every size (100, 1,000 and 10,000 chats in a full run), and the
  exponent ``k`` of ``cpu ~ chats**k`` fitted through them (target: at most 1.05: a chat costs
  the same in a large fleet as in a small one). ``ratio`` is the CPU per delta at the largest
  size against the smallest.
* ``fleet.core.memory`` / ``fleet.core.cpu``: the same questions for the core alone: open
  readers (upgrade done) with their translators, Python heap per chat (tracemalloc); and the
  frames of all chats interleaved (round robin) against one chat's frames in a row.
* ``fleet.core-asyncio.memory`` / ``.cpu``: the core's reader and translator on a minimal
  asyncio driver, one loopback socket per chat to the fake server (``_agent.core_turn_asyncio``),
  at the middle size: traced heap per open chat, and CPU per delta against one chat alone.
* ``fleet.temporal.sqlite`` / ``fleet.temporal.postgres``: durable workflows on Temporal
  (docs/scale-out.md): three worker processes run the three-step order workflow of
  ``tests/temporal`` (50 workflows; 20 in quick mode) on a Temporal dev server and the fake
  server, with the store on SQLite, then on PostgreSQL. Each line reports workflows per minute
  per worker; the PostgreSQL line's ratio is its wall time against the SQLite run's (the cost
  of a store shared across machines, the workflow lease included).

Where an open, idle chat's memory goes (tracemalloc grouped by file and line, 200 agents on
one client; the quick run measured about 22 KiB on asyncio and 26 KiB on trio at 100 chats;
at 1,000 chats, after the last cuts below, about 19.4 KiB on asyncio and 22.4 KiB on trio,
of which the consumer's task is about 3.9 KiB on asyncio and 3.6 KiB on trio, the same at
100, 1,000 and 10,000 tasks: the library's share is about 15.5 KiB and 18.8 KiB):

* the stream reader and its WebSocket client: about 2.4 KiB (the reader's event deque was
  0.75 KiB of it, an empty ``collections.deque`` holding a block of 64 slots, until an idle
  reader let it go, see below; wsproto's connection is made again only when a frame needs
  it);
* the turn, segment and session machines (suspended generator frames: the turn's loop, the
  segment's run and read loop; the turn's parts deque, sets and dicts), the session
  stream and the engine: about 5.5 KiB; the translator
  about 0.5 KiB; the connection machine's jobs about 1.4 KiB;
* the agent's stream and the driver's run: about 1.2 KiB; the agent itself about 1.1 KiB;
* the runtime with the consumer's own task (here one anyio task per chat reading
  ``text_stream``, about 4 KiB of it, an asyncio event's deque of 0.75 KiB included): about
  8 KiB on asyncio before the socket's task was cut (the transport, its protocol, the
  socket's task waiting for the end) and
  10.9 KiB on trio (the socket's task and its cancel scope, and the parked
  ``receive_some``).

The fake serves every chat from one process and wakes, after each request it answers and
each chat its ticker advances, only the streams of the chats that changed (and every watch):
waking every open stream each time cost it time in the square of the open chats, and at
10,000 it answered upgrades later than the client's 30 s.

Cut so far: a redactor's copies of the token's beginnings (4 KiB a chat, made only when a
cut text is redacted now), the last bytes read (kept while the socket waited), the asyncio
events' empty deques, trio's idle writer task per socket (about 4.5 KiB on trio), the
instance dictionaries of the reader, the turn and the session stream (``__slots__``, about
3 KiB), the translator's empty id sets, the decoded message the replay filter kept (a
fingerprint now, about 1.2 KiB), wsproto's handshake with its h11 state once the upgrade
is done (about 2.5 KiB), the turn's retry generator and the read loop's wait generator
(a bare ``yield`` now, about 0.45 KiB), wsproto's connection between messages (the fast path
hands it whole frames only, so a fresh one is made when a control frame or a fragment comes:
about 1.6 KiB), and on asyncio the stream reader, writer, drain waiters and pending read of
``asyncio.open_connection`` (a protocol hands each chunk to the client as it arrives: about
2 KiB). The quick run went from about 26 to 22 KiB on asyncio and from 29 to 26 KiB on trio.
Then the turn's retry wrapper, a generator frame of its own, made only for a generate turn
that may retry (about 0.3 KiB), and on trio the reader's own cancel scope (a drop for a peer
that reads nothing wakes the read by notifying the socket's closing: about 0.6 KiB): at
1,000 chats, from 20,169 to 19,877 bytes on asyncio and from 23,893 to 22,960 on trio.
Then the segment's body generator: its submission is a generator that has finished before the
read loop starts and its closing a plain method, so an idle chat holds three frames (the
turn's loop, the segment's run and its read loop) rather than four (about 0.33 KiB); and on
asyncio the socket's task, which ends once the socket is made (its protocol reports the end,
and a close starts a task of its own: about 1.25 KiB). At 1,000 chats, from 19,798 to 18,182
bytes on asyncio and from 22,929 to 22,578 on trio.
Then the core's empty containers: the turn's parts deque once its consumer drained it and
the reader's event queue (both let go at the read loop's wait and made afresh for the next
part or event; a stream in full flow keeps its queue, so no delta makes one), the session's
set of submitted tool call ids (shared and empty until a submission), the engine's emptied
table of requests (a dict keeps its slots), the session stream's two dicts of connection ids
(one small tuple) and six of the step builder's eight lists (made with their first part).
At 1,000 chats, from 18,218 to 15,542 bytes on asyncio and from 22,623 to 19,936 on trio.
Then the consumer's wait: the stream's loops await the handle's event themselves, and the
runtime's event hands out a bare future on asyncio and trio's own rescheduling wait on trio
(an event of its own, lighter than ``trio.Event``), so a waiting consumer holds no coroutine
frame of the library (about 0.45 KiB on asyncio, 0.6 KiB on trio); and on trio, the socket's
read: a plain connection is read on its own socket taken from trio's stream, without the
stream's and the trio socket's coroutines on the wait (about 1.3 KiB), and the reader is its
own system task with a cancel scope only while it connects, reading in its own frame (about
1.4 KiB). At 1,000 chats, from 18,258 to 17,769 bytes on asyncio and from 22,670 to 19,020 on
trio (each cut measured without the other); what is left of the io side on trio is mostly
trio's: the reader's task and its readiness wait (about 2.8 KiB), which one task per socket
costs there. With the io cuts alone, at 10,000 chats (``fleet_client``, every stream open and idle at the sample, none redialed): 17,534 bytes on
asyncio (consumer 3,988, library 13,546) and 18,955 on trio (consumer 3,772, library 15,183).
The CPU per delta at 100, 1,000 and 10,000 chats: 47.7, 45.0 and 34.5 us on trio (``k``
0.93); 21.5, 24.0 and 56.2 us on asyncio (``k`` 1.21, its largest fleet measured on a machine
loaded with other work, the 10,000 streams taking the whole open margin to open).
``python -m tests.bench.fleet_snapshot`` prints this breakdown for a fleet of any size, and
``python -m tests.bench.fleet_client --sizes 100,1000,10000`` runs the client lines alone at
the sizes given.
"""

from __future__ import annotations

import contextlib
import gc
import resource
import statistics
import time
import tracemalloc
from typing import Any

from ._common import (
    BenchSkipped,
    Result,
    Settings,
    cpu_clock,
    fitted_exponent,
    paired,
    skipped,
)
from ._data import one_event_frames, transcript_lines
from ._pipelines import frame_entry, open_reader

__all__ = ["CLIENT_RUNTIMES", "CPU_TARGET", "EXPONENT_TARGET", "MEMORY_TARGET", "run"]

KIB = 1024
#: Traced Python heap per open chat.
MEMORY_TARGET = 16 * KIB
#: Per-delta CPU of the fleet / of one chat (the core lines).
CPU_TARGET = 1.5
#: ``k`` in ``cpu ~ chats**k`` for the client lines.
EXPONENT_TARGET = 1.05
#: The size of the full run's largest fleet.
FULL_FLEET = 10_000
#: The runtimes of the client lines.
CLIENT_RUNTIMES = ("asyncio", "trio")
_CLIENT_LINES = tuple(f"{r}.{kind}" for r in CLIENT_RUNTIMES for kind in ("memory", "cpu"))
#: Chats of a fleet opened at once (``_client_fleet``).
OPEN_WAVE = 250
#: Seconds a whole fleet measurement may take.
FLEET_TIMEOUT = 1800.0
#: Seconds between two deltas of a fleet chat, per chat of the fleet (at least 20 ms): a run
#: lasts long enough that the fake relays its deltas even when it serves every chat at once (it
#: relays only while a run's episode is open; a pace the fake cannot hold delivers most chats
#: as their snapshots), and one chat alone is measured at the same pace.
FLEET_DELAY_PER_CHAT = 1e-4


def open_margin(chats: int) -> float:
    """Seconds the fake waits before a run starts, so that every stream of a ``chats``-chat
    fleet is open (and idle) before the first delta: 60 ms per chat (opening one, traced, on a
    loaded machine, takes up to 30 ms on asyncio and 45 ms on trio; the memory line says how
    many chats had started streaming when it was sampled)."""
    return 2.0 + 0.06 * chats


def fleet_ping_interval(chats: int) -> float:
    """The fake's heartbeat for a ``chats``-chat fleet: a ping (and a pong's grace) every
    15 s, or every whole fleet measurement for the large ones (a process opening 10,000
    streams, traced, answers a ping late; a stream closed for it would redial and be counted
    twice)."""
    return 15.0 if chats <= 100 else 2 * FLEET_TIMEOUT


def fleet_chunk_delay(chats: int) -> float:
    """The pace of every run of a ``chats``-chat fleet measurement (0.1 s at 1,000)."""
    return max(0.02, FLEET_DELAY_PER_CHAT * chats)


def raise_fd_limit() -> None:
    """Let this process hold one socket per chat (and the client's REST connections)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _cpu_verdict(ratio: float | None, streamed: int, chats: int) -> dict[str, Any]:
    """The verdict of a fleet CPU line. It needs nine chats in ten to have streamed deltas:
    the fake relays a run's deltas only while its episode is open, so a chat whose run it
    could not pace arrives as its snapshot alone and costs almost nothing."""
    note = "a lone chat gets about one delta per socket read, a busy fleet more"
    if streamed < 0.9 * chats:
        return {
            "note": f"only {streamed} of {chats} chats streamed deltas: not comparable",
        }
    return {"meets_target": ratio is not None and ratio <= CPU_TARGET, "note": note}


# -- the core alone ---------------------------------------------------------------------------


def _open_chats(count: int) -> list[tuple[Any, Any, Any]]:
    from coder_proto._stream.translator import TurnTranslator

    chats = []
    for _ in range(count):
        reader, _server = open_reader()
        chats.append((reader, frame_entry(reader), TurnTranslator(turn_cursor=1)))
    return chats


def _feed(chat: tuple[Any, Any, Any], frame: str) -> int:
    reader, entry, translator = chat
    entry(frame, 0.0)
    events = reader.events
    count = 0
    while events:
        count += len(translator.ingest(events.popleft()))
    return count


def _core_memory(chats: int, frames: list[str]) -> Result:
    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        opened = _open_chats(chats)
        for chat in opened:
            for frame in frames[:3]:  # status + two deltas: a chat mid-turn
                _feed(chat, frame)
        gc.collect()
        after, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    per_chat = (after - before) / chats
    return Result(
        "fleet.core.memory",
        chats,
        None,
        None,
        per_chat / MEMORY_TARGET,
        {
            "bytes_per_chat": round(per_chat),
            "target": f"<= {MEMORY_TARGET // KIB} KiB traced per open chat",
            "meets_target": per_chat <= MEMORY_TARGET,
            "via": "tracemalloc: StreamReader (upgraded WebSocketClient) + TurnTranslator",
        },
    )


def _core_cpu(chats: int, frames: list[str], rounds: int) -> Result:
    def fleet() -> Any:
        opened = _open_chats(chats)

        def go() -> None:
            for frame in frames:
                for chat in opened:
                    _feed(chat, frame)

        return go

    def single() -> Any:
        opened = _open_chats(chats)

        def go() -> None:
            for chat in opened:  # the same deltas, one chat after another
                for frame in frames:
                    _feed(chat, frame)

        return go

    pair = paired(fleet, single, rounds=rounds, clock=cpu_clock)
    deltas = chats * (len(frames) - 3)
    return Result(
        "fleet.core.cpu",
        chats,
        pair.value_s,
        pair.floor_s,
        pair.ratio,
        {
            "per_delta_us": pair.value_s / deltas * 1e6,
            "single_per_delta_us": pair.floor_s / deltas * 1e6,
            "target": f"<= {CPU_TARGET}x one chat",
            "meets_target": pair.ratio <= CPU_TARGET,
            "via": "frames of all chats interleaved vs the chats one after another",
        },
    )


# -- the core on asyncio, over loopback -------------------------------------------------------


def _core_asyncio_single(info: dict[str, Any], rounds: int) -> tuple[float, float]:
    """CPU seconds of one chat's turn through ``core_turn_asyncio``, first delta to end, and
    its socket reads."""
    import asyncio

    from ._agent import core_turn_asyncio

    async def main() -> list[tuple[float, float]]:
        out = []
        for _ in range(rounds):
            marks: dict[str, float] = {}
            await core_turn_asyncio(info, marks=marks)
            if "first_delta_cpu" in marks:  # else the run ended before the stream opened
                out.append((time.process_time() - marks["first_delta_cpu"], marks["reads"]))
        if not out:
            raise BenchSkipped("no turn streamed deltas: the fake server finished them first")
        return out

    rows = asyncio.run(main())
    return statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)


def _core_asyncio_fleet(info: dict[str, Any], chats: int, timeout: float) -> dict[str, Any]:
    """``chats`` concurrent ``core_turn_asyncio`` turns: RSS once every chat is open (its
    first stream event arrived), then CPU until all are done."""
    import asyncio

    from ._agent import core_turn_asyncio
    from .memory import _status_kib

    async def main() -> dict[str, Any]:
        count = 0
        all_open = asyncio.Event()

        async def opened() -> None:
            nonlocal count
            count += 1
            if count == chats:
                all_open.set()
            await all_open.wait()

        gc.collect()
        rss_before = _status_kib("VmRSS") * KIB
        tracemalloc.start()
        traced_before, _ = tracemalloc.get_traced_memory()
        started = time.perf_counter()
        marks: list[dict[str, float]] = [{} for _ in range(chats)]
        tasks = [
            asyncio.create_task(core_turn_asyncio(info, opened=opened, marks=m)) for m in marks
        ]
        await asyncio.wait_for(all_open.wait(), timeout)
        open_s = time.perf_counter() - started
        gc.collect()
        traced_open, _ = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        rss_open = _status_kib("VmRSS") * KIB
        cpu_start = time.process_time()
        chars = await asyncio.wait_for(asyncio.gather(*tasks), timeout)
        return {
            "open_s": open_s,
            "rss_per_chat": (rss_open - rss_before) / chats,
            "traced_per_chat": (traced_open - traced_before) / chats,
            "cpu": time.process_time() - cpu_start,
            "chars": sum(chars),
            "reads": sum(m.get("reads", 0) for m in marks) / chats,
            "streamed": sum(1 for m in marks if "first_delta_cpu" in m),
        }

    return asyncio.run(main())


def _core_asyncio(settings: Settings, chats: int, deltas: int, text_chars: int) -> list[Result]:
    from ._agent import ServerProcess

    raise_fd_limit()
    pace = fleet_chunk_delay(chats)
    with ServerProcess(deltas, chunk_delay=pace) as server:
        single, single_reads = _core_asyncio_single(server.info, max(settings.e2e_rounds, 1))
    # Every chat is created (one request at a time) and open before the first run starts.
    with ServerProcess(
        deltas,
        start_delay=open_margin(chats),
        chunk_delay=pace,
        ping_interval=fleet_ping_interval(chats),
    ) as server:
        measured = _core_asyncio_fleet(server.info, chats, timeout=900.0)
    # The traced Python heap is judged (RSS, kept beside it, counts the socket buffers but
    # hides allocations that reuse freed memory, and is noisy).
    per_chat = measured["traced_per_chat"]
    ratio = measured["cpu"] / chats / single if single > 0 else None
    via = "StreamReader + TurnTranslator on asyncio streams, one socket per chat (no CoderAgent)"
    return [
        Result(
            "fleet.core-asyncio.memory",
            chats,
            measured["open_s"],
            None,
            per_chat / MEMORY_TARGET,
            {
                "bytes_per_chat": round(per_chat),
                "rss_bytes_per_chat": round(measured["rss_per_chat"]),
                "traced_bytes_per_chat": round(measured["traced_per_chat"]),
                "target": f"<= {MEMORY_TARGET // KIB} KiB traced per open chat",
                "meets_target": per_chat <= MEMORY_TARGET,
                "via": via,
            },
        ),
        Result(
            "fleet.core-asyncio.cpu",
            chats,
            measured["cpu"],
            single * chats,
            ratio,
            {
                "per_delta_us": measured["cpu"] / chats / deltas * 1e6,
                "pace_s": pace,
                "single_per_delta_us": single / deltas * 1e6,
                "text_chars_ok": measured["chars"] == chats * text_chars,
                "streamed_chats": measured["streamed"],
                "reads_per_chat": measured["reads"],
                "single_reads": single_reads,
                "target": f"<= {CPU_TARGET}x one chat",
                **_cpu_verdict(ratio, measured["streamed"], chats),
                "via": via,
            },
        ),
    ]


# -- the real client, on asyncio and on trio ---------------------------------------------------


def consumer_task_bytes(runtime: str, chats: int) -> float:
    """Traced heap per task of ``chats`` anyio tasks in one task group, each waiting on an
    event: the consumer's own task, which the fleet's memory sample counts beside the
    library's objects (a service streaming many chats holds one such task per chat too)."""
    import anyio

    async def main() -> float:
        started = 0
        all_started = anyio.Event()
        release = anyio.Event()

        async def one() -> None:
            nonlocal started
            started += 1
            if started == chats:
                all_started.set()
            await release.wait()

        gc.collect()
        tracemalloc.start()
        try:
            before, _ = tracemalloc.get_traced_memory()
            async with anyio.create_task_group() as group:
                for _ in range(chats):
                    group.start_soon(one)
                await all_started.wait()
                gc.collect()
                after, _ = tracemalloc.get_traced_memory()
                release.set()
        finally:
            tracemalloc.stop()
        return (after - before) / chats

    return anyio.run(main, backend=runtime)  # type: ignore[no-any-return]


def _client_fleet(
    runtime: str,
    cls: Any,
    info: dict[str, Any],
    chats: int,
    timeout: float,
    snapshots: list[Any] | None = None,
    trace_frames: int = 1,
) -> dict[str, Any]:
    """``chats`` agents sharing one client stream one turn each, on ``runtime``. The memory
    sample is taken when every stream is open (``ws:open`` transport events; the fake starts
    the runs later, so the streams are open and idle), CPU is counted from there to the end
    (every chat receiving). Given ``snapshots``, the sample also appends a tracemalloc
    snapshot to it (with ``trace_frames`` frames per trace) and the chats are cancelled there
    (no CPU is counted)."""
    import anyio

    from ._agent import PROMPT
    from .memory import _status_kib

    client_class = _client_class(runtime)

    async def main() -> dict[str, Any]:
        opened = 0
        all_open = anyio.Event()
        chars_total = 0
        streamed = 0
        # Chats that received a delta before the sample, and those whose turn had ended: a
        # chat that ended holds almost nothing, so the sample would flatter the rest.
        early = ended_early = 0

        wave_open = anyio.Event()
        wave_end = 0

        # Opens of a stream redialed (its first upgrade was not answered in time, or it
        # ended): counted as opens, they could bring the sample forward.
        redials = 0

        def hook(event: Any) -> None:
            nonlocal opened, redials
            if getattr(event, "type", None) == "ws:open":
                opened += 1
                if event.attempt > 1:
                    redials += 1
                if opened >= wave_end:
                    wave_open.set()
                if opened >= chats:
                    all_open.set()

        async def one(agent: Any) -> None:
            nonlocal chars_total, streamed, early, ended_early
            pieces = 0
            async with agent.stream(PROMPT) as stream:
                async for delta in stream.text_stream:
                    if not pieces and not all_open.is_set():
                        early += 1
                    chars_total += len(delta)
                    pieces += 1
            if not all_open.is_set():
                ended_early += 1
            if pieces > 1:  # else only the committed snapshot arrived
                streamed += 1

        gc.collect()
        rss_before = _status_kib("VmRSS") * KIB
        tracemalloc.start(trace_frames)
        traced_before, _ = tracemalloc.get_traced_memory()
        started = time.perf_counter()
        try:
            client = client_class(info["url"], info["token"], on_transport_event=hook)
            async with client, contextlib.AsyncExitStack() as stack:
                agents = [
                    await stack.enter_async_context(
                        cls(client=client, organization_id=info["organization_id"])
                    )
                    for _ in range(chats)
                ]
                with anyio.fail_after(timeout):
                    async with anyio.create_task_group() as group:
                        # Opened in waves, each once the one before is open: a service
                        # opens its chats over time, and ten thousand upgrades at once
                        # would wait on the fake (one process) longer than a client waits.
                        for start in range(0, chats, OPEN_WAVE):
                            wave_end = min(start + OPEN_WAVE, chats)
                            wave_open = anyio.Event()
                            for agent in agents[start:wave_end]:
                                group.start_soon(one, agent)
                            await wave_open.wait()
                        await all_open.wait()
                        open_s = time.perf_counter() - started
                        gc.collect()
                        traced_open, _ = tracemalloc.get_traced_memory()
                        if snapshots is not None:
                            snapshots.append(tracemalloc.take_snapshot())
                            group.cancel_scope.cancel()
                        tracemalloc.stop()
                        rss_open = _status_kib("VmRSS") * KIB
                        cpu_start = time.process_time()
                cpu = time.process_time() - cpu_start
        finally:
            tracemalloc.stop()
        return {
            "open_s": open_s,
            "rss_per_chat": (rss_open - rss_before) / chats,
            "traced_per_chat": (traced_open - traced_before) / chats,
            "cpu": cpu,
            "chars": chars_total,
            "streamed": streamed,
            "early": early,
            "ended_early": ended_early,
            "redials": redials,
        }

    return anyio.run(main, backend=runtime)  # type: ignore[no-any-return]


def _client_class(runtime: str) -> Any:
    if runtime == "trio":
        from coder_io_trio.client import CoderChatClient as TrioClient

        return TrioClient
    from coder_io_asyncio.client import CoderChatClient

    return CoderChatClient


def _client_lines(settings: Settings, runtime: str, text_chars: int) -> list[Result]:
    """``fleet.<runtime>.memory`` and ``fleet.<runtime>.cpu``: one fleet of each size of
    ``settings.fleet_sizes`` (one fake server process each), memory at the largest."""
    from ._agent import ServerProcess, agent_class

    names = (f"fleet.{runtime}.memory", f"fleet.{runtime}.cpu")
    sizes, deltas = settings.fleet_sizes, settings.fleet_deltas
    largest = sizes[-1]
    try:
        cls = agent_class(runtime)
        if runtime == "trio":
            import trio  # noqa: F401
    except (BenchSkipped, ImportError) as exc:
        return [skipped(name, largest, str(exc)) for name in names]
    raise_fd_limit()
    measured: dict[int, dict[str, Any]] = {}
    try:
        for chats in sizes:
            with ServerProcess(
                deltas,
                start_delay=open_margin(chats),
                chunk_delay=fleet_chunk_delay(chats),
                ping_interval=fleet_ping_interval(chats),
            ) as server:
                measured[chats] = _client_fleet(runtime, cls, server.info, chats, FLEET_TIMEOUT)
    except Exception as exc:  # the adapter under test failed: report it, go on
        reason = (
            str(exc) if isinstance(exc, BenchSkipped) else f"failed: {type(exc).__name__}: {exc}"
        )
        return [skipped(name, largest, reason) for name in names]
    top = measured[largest]
    per_chat = top["traced_per_chat"]
    consumer = consumer_task_bytes(runtime, largest)
    size_note = "" if largest >= FULL_FLEET else f"{largest} chats (the full run opens 10,000)"
    memory_extra: dict[str, Any] = {
        "bytes_per_chat": round(per_chat),
        "traced_bytes_per_chat": round(per_chat),
        "rss_bytes_per_chat": round(top["rss_per_chat"]),
        "traced_bytes_per_chat_by_size": {
            str(n): round(m["traced_per_chat"]) for n, m in measured.items()
        },
        # The judged figure counts the consumer's task (each chat's reading task, which a
        # user pays too); the library's own share is the figure without it.
        "consumer_task_bytes_per_chat": round(consumer),
        "library_bytes_per_chat": round(per_chat - consumer),
        "streaming_at_sample_by_size": {str(n): m["early"] for n, m in measured.items()},
        "redialed_opens_by_size": {str(n): m["redials"] for n, m in measured.items()},
        "target": f"<= {MEMORY_TARGET // KIB} KiB traced per open chat",
        "meets_target": per_chat <= MEMORY_TARGET,
        "via": "agents share one CoderChatClient; tracemalloc once every stream is open",
        "runtime": runtime,
    }
    if top["ended_early"] or top["redials"]:
        memory_extra.pop("meets_target")
        memory_extra["note"] = (
            f"{top['ended_early']} of {largest} chats had ended and {top['redials']} streams"
            " were redialed before every stream was open: not comparable"
        )
    elif size_note:
        memory_extra["note"] = size_note
    per_delta = {n: m["cpu"] / (n * deltas) for n, m in measured.items()}
    exponent = fitted_exponent([(n, m["cpu"]) for n, m in measured.items()])
    smallest = sizes[0]
    streamed = min(m["streamed"] / n for n, m in measured.items())
    cpu_extra: dict[str, Any] = {
        "exponent": exponent,
        "per_delta_us": per_delta[largest] * 1e6,
        "per_delta_us_by_size": {str(n): round(v * 1e6, 2) for n, v in per_delta.items()},
        "deltas_per_chat": deltas,
        "pace_s_by_size": {str(n): fleet_chunk_delay(n) for n in sizes},
        "open_s_by_size": {str(n): round(m["open_s"], 2) for n, m in measured.items()},
        "streamed_chats_by_size": {str(n): m["streamed"] for n, m in measured.items()},
        "text_chars_ok": all(m["chars"] == n * text_chars for n, m in measured.items()),
        "target": f"exponent <= {EXPONENT_TARGET} (CPU ~ chats**k, {smallest} to {largest})",
        "via": "CPU from every stream open to the end, fitted over the sizes",
        "runtime": runtime,
    }
    if streamed < 0.9:
        cpu_extra["note"] = (
            f"only {streamed:.0%} of a fleet's chats streamed deltas: not comparable"
        )
    else:
        cpu_extra["meets_target"] = exponent <= EXPONENT_TARGET
        if size_note:
            cpu_extra["note"] = size_note
    return [
        Result(names[0], largest, top["open_s"], None, per_chat / MEMORY_TARGET, memory_extra),
        Result(
            names[1],
            largest,
            top["cpu"],
            measured[smallest]["cpu"] * largest / smallest,
            per_delta[largest] / per_delta[smallest] if per_delta[smallest] > 0 else None,
            cpu_extra,
        ),
    ]


# -- durable workflows on Temporal ------------------------------------------------------------

#: Worker processes of the Temporal fleet.
TEMPORAL_WORKERS = 3


def _temporal_workflows(settings: Settings) -> int:
    return {"full": 50, "quick": 20}.get(settings.mode, 0)


def _temporal_fleet(store: str, workflows: int, temporal: Any, postgres: Any) -> tuple[float, int]:
    """One fleet run without kills: its wall time (first start to last result) and the
    number of chats it left (all archived, checked as in the tests)."""
    import os
    import tempfile
    import uuid

    from tests.temporal.harness import (
        add_scripts,
        check_exactly_once,
        fake_server,
        run_fleet,
        worker_env,
    )

    queue = f"bench-{store}-{uuid.uuid4().hex[:6]}"
    with tempfile.TemporaryDirectory() as tmp, fake_server() as server:
        add_scripts(server)
        payments_db = os.path.join(tmp, "pay.sqlite3")
        if store == "postgres":
            schema = f"bench_{uuid.uuid4().hex[:12]}"
            env = worker_env(
                temporal.address, queue, server, postgres.conninfo(), payments_db,
                DURABLE_PG_SCHEMA=schema,
            )  # fmt: skip
        else:
            env = worker_env(
                temporal.address, queue, server, os.path.join(tmp, "s.sqlite3"), payments_db
            )
        try:
            fleet = run_fleet(
                temporal.address, env, tmp, workers=TEMPORAL_WORKERS, workflows=workflows
            )
        finally:
            if store == "postgres":
                postgres.drop_schema(schema)
        server.wait_idle(5.0)
        counts = check_exactly_once(server, payments_db, fleet.results)
    return fleet.elapsed, counts["chats"]


def _temporal(settings: Settings) -> list[Result]:
    workflows = _temporal_workflows(settings)
    names = ("fleet.temporal.sqlite", "fleet.temporal.postgres")
    if not workflows:
        reason = "runs in quick and full modes (tests/temporal checks it in every run)"
        return [skipped(name, 0, reason) for name in names]
    try:
        from tests.postgres_server import PostgresServer, ServerUnavailable
        from tests.temporal.server import ServerUnavailable as TemporalUnavailable
        from tests.temporal.server import TemporalServer
    except ImportError as exc:  # temporalio or psycopg missing
        return [skipped(name, workflows, f"needs the test extra: {exc}") for name in names]
    temporal, postgres = TemporalServer(), PostgresServer()
    try:
        temporal.start()
        postgres.start()
        sqlite_s, sqlite_chats = _temporal_fleet("sqlite", workflows, temporal, postgres)
        pg_s, pg_chats = _temporal_fleet("postgres", workflows, temporal, postgres)
    except (ServerUnavailable, TemporalUnavailable) as exc:
        return [skipped(name, workflows, str(exc)) for name in names]
    except Exception as exc:  # the fleet failed: report it, go on
        reason = f"failed: {type(exc).__name__}: {str(exc)[:300]}"
        return [skipped(name, workflows, reason) for name in names]
    finally:
        postgres.stop()
        temporal.stop()

    def rate(seconds: float) -> float:
        return workflows / (seconds / 60) / TEMPORAL_WORKERS

    via = f"{TEMPORAL_WORKERS} worker processes, three-step order workflow, fake server"
    return [
        Result(
            names[0],
            workflows,
            sqlite_s,
            None,
            None,
            {
                "workflows_per_min_per_worker": round(rate(sqlite_s), 1),
                "chats": sqlite_chats,
                "target": "report",
                "note": f"{rate(sqlite_s):.1f} workflows/min/worker",
                "via": via + ", SQLiteStore",
            },
        ),
        Result(
            names[1],
            workflows,
            pg_s,
            sqlite_s,
            pg_s / sqlite_s,
            {
                "workflows_per_min_per_worker": round(rate(pg_s), 1),
                "sqlite_workflows_per_min_per_worker": round(rate(sqlite_s), 1),
                "chats": pg_chats,
                "target": "report: wall time against the same run on SQLite",
                "note": f"{rate(pg_s):.1f} workflows/min/worker (SQLite {rate(sqlite_s):.1f})",
                "via": via + ", PostgresStore",
            },
        ),
    ]


def run(settings: Settings) -> list[Result]:
    """Core results always; the asyncio client's when the adapter and the fake exist; the
    Temporal fleet in quick and full modes."""
    out = _run_chats(settings)
    out.extend(_temporal(settings))
    return out


def _run_chats(settings: Settings) -> list[Result]:
    """The chat-fleet lines (core, core on asyncio, the client on asyncio and on trio)."""
    chats, deltas = settings.fleet_chats, settings.fleet_deltas
    frames = one_event_frames(transcript_lines(deltas))
    out = [_core_memory(chats, frames), _core_cpu(chats, frames, max(settings.rounds // 2, 1))]

    from ._agent import require_fake_server
    from ._server import transcript_texts

    try:
        require_fake_server()
    except BenchSkipped as exc:
        for name in ("core-asyncio.memory", "core-asyncio.cpu", *_CLIENT_LINES):
            out.append(skipped(f"fleet.{name}", chats, str(exc)))
        return out
    _, text = transcript_texts(deltas)
    # The core on its minimal driver, at the middle size: a diagnosis of the client lines.
    middle = settings.fleet_sizes[len(settings.fleet_sizes) // 2]
    out.extend(_core_asyncio(settings, middle, deltas, len(text)))
    for runtime in CLIENT_RUNTIMES:
        out.extend(_client_lines(settings, runtime, len(text)))
    return out
