"""Benchmark 5, fleet: many concurrent chats in one asyncio process.

* ``fleet.asyncio.memory``: ``chats`` agents each open a stream against the fake server (its
  own process) and wait, after their first delta, until all are open; RSS growth per open chat
  (target: at most 64 KiB). ``value_s`` is the time to open them all.
* ``fleet.asyncio.cpu``: then all of them stream their ``deltas`` deltas at once; CPU per delta
  against one chat alone streaming the same turn (target: at most 1.5x).
* ``fleet.core.memory`` / ``fleet.core.cpu``: the same questions for the core alone: open
  readers (upgrade done) with their translators, Python heap per chat (tracemalloc); and the
  frames of all chats interleaved (round robin) against one chat's frames in a row.
* ``fleet.core-asyncio.memory`` / ``.cpu``: the core's reader and translator on a minimal
  asyncio driver, one loopback socket per chat to the fake server (``_agent.core_turn_asyncio``):
  RSS growth per open chat, and CPU per delta against one chat alone.
* ``fleet.temporal.sqlite`` / ``fleet.temporal.postgres``: durable workflows on Temporal
  (docs/scale-out.md): three worker processes run the three-step order workflow of
  ``tests/temporal`` (50 workflows; 20 in quick mode) on a Temporal dev server and the fake
  server, with the store on SQLite, then on PostgreSQL. Each line reports workflows per minute
  per worker; the PostgreSQL line's ratio is its wall time against the SQLite run's (the cost
  of a store shared across machines, the workflow lease included).
"""

from __future__ import annotations

import contextlib
import gc
import resource
import statistics
import time
import tracemalloc
from typing import Any

from ._common import BenchSkipped, Result, Settings, cpu_clock, paired, skipped
from ._data import one_event_frames, transcript_lines
from ._pipelines import frame_entry, open_reader

__all__ = ["CPU_TARGET", "MEMORY_TARGET", "run"]

KIB = 1024
#: Per open chat.
MEMORY_TARGET = 64 * KIB
#: Per-delta CPU of the fleet / of one chat.
CPU_TARGET = 1.5
#: Seconds between two deltas of a fleet chat, per chat of the fleet (at least 5 ms): a run
#: lasts long enough that the fake relays its deltas even when it serves every chat at once (it
#: relays only while a run's episode is open; at 5 ms, 1,000 chats outran it and most arrived
#: as snapshots), and one chat alone is measured at the same pace.
FLEET_DELAY_PER_CHAT = 3e-5


def fleet_chunk_delay(chats: int) -> float:
    """The pace of every run of a ``chats``-chat fleet measurement (0.03 s at 1,000)."""
    return max(0.005, FLEET_DELAY_PER_CHAT * chats)


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
            "target": "<= 64 KiB per open chat",
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
    with ServerProcess(deltas, start_delay=1.0 + 0.02 * chats, chunk_delay=pace) as server:
        measured = _core_asyncio_fleet(server.info, chats, timeout=900.0)
    # RSS can hide allocations that reuse freed memory; the traced Python heap cannot (but
    # misses socket buffers): the larger of the two.
    per_chat = max(measured["rss_per_chat"], measured["traced_per_chat"])
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
                "target": "<= 64 KiB per open chat",
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


# -- the real client --------------------------------------------------------------------------


def _shared_client(info: dict[str, Any], hook: Any) -> Any:
    """One ``CoderChatClient`` for every agent of the fleet (one HTTP connection pool and
    TLS context, as a service running many chats would share), reporting transport events
    to ``hook``."""
    from coder_io_asyncio.client import CoderChatClient

    return CoderChatClient(info["url"], info["token"], on_transport_event=hook)


def _agent_fleet(cls: Any, info: dict[str, Any], chats: int, timeout: float) -> dict[str, Any]:
    """``chats`` agents sharing one client stream one turn each. The memory sample is taken
    when every stream is open (``ws:open`` transport events; the fake starts the runs later),
    CPU is counted from there to the end."""
    import asyncio

    from ._agent import PROMPT
    from .memory import _status_kib

    async def main() -> dict[str, Any]:
        opened = 0
        all_open = asyncio.Event()
        chars_total = 0
        streamed = 0

        def hook(event: Any) -> None:
            nonlocal opened
            if getattr(event, "type", None) == "ws:open":
                opened += 1
                if opened >= chats:
                    all_open.set()

        async def one(agent: Any) -> None:
            nonlocal chars_total, streamed
            pieces = 0
            async with agent.stream(PROMPT) as stream:
                async for delta in stream.text_stream:
                    chars_total += len(delta)
                    pieces += 1
            if pieces > 1:  # else only the committed snapshot arrived
                streamed += 1

        gc.collect()
        rss_before = _status_kib("VmRSS") * KIB
        tracemalloc.start()
        traced_before, _ = tracemalloc.get_traced_memory()
        started = time.perf_counter()
        async with _shared_client(info, hook) as client, contextlib.AsyncExitStack() as stack:
            agents = [
                await stack.enter_async_context(
                    cls(client=client, organization_id=info["organization_id"])
                )
                for _ in range(chats)
            ]
            tasks = [asyncio.create_task(one(a)) for a in agents]
            await asyncio.wait_for(all_open.wait(), timeout)
            open_s = time.perf_counter() - started
            gc.collect()
            traced_open, _ = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            rss_open = _status_kib("VmRSS") * KIB
            cpu_start = time.process_time()
            await asyncio.wait_for(asyncio.gather(*tasks), timeout)
            cpu = time.process_time() - cpu_start
        return {
            "open_s": open_s,
            "rss_per_chat": (rss_open - rss_before) / chats,
            "traced_per_chat": (traced_open - traced_before) / chats,
            "cpu": cpu,
            "chars": chars_total,
            "streamed": streamed,
        }

    return asyncio.run(main())


def _agent_single_cpu(cls: Any, info: dict[str, Any], rounds: int) -> float:
    """CPU seconds of one agent's turn, from its stream's ``ws:open`` to the end."""
    import asyncio

    from ._agent import PROMPT

    async def main() -> list[float]:
        out = []
        for _ in range(rounds):
            marks: dict[str, float] = {}

            def hook(event: Any, marks: dict[str, float] = marks) -> None:
                if getattr(event, "type", None) == "ws:open" and "open" not in marks:
                    marks["open"] = time.process_time()

            async with _shared_client(info, hook) as client:
                async with cls(client=client, organization_id=info["organization_id"]) as agent:
                    async with agent.stream(PROMPT) as stream:
                        async for _delta in stream.text_stream:
                            pass
                    out.append(time.process_time() - marks.get("open", time.process_time()))
        return out

    return statistics.median(asyncio.run(main()))


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
        from tests.stores.postgres_server import PostgresServer, ServerUnavailable
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
    """The chat-fleet lines (core, core on asyncio, the asyncio client)."""
    chats, deltas = settings.fleet_chats, settings.fleet_deltas
    frames = one_event_frames(transcript_lines(deltas))
    out = [_core_memory(chats, frames), _core_cpu(chats, frames, max(settings.rounds // 2, 1))]

    from ._agent import ServerProcess, agent_class, require_fake_server
    from ._server import transcript_texts

    try:
        require_fake_server()
    except BenchSkipped as exc:
        for name in ("core-asyncio.memory", "core-asyncio.cpu", "asyncio.memory", "asyncio.cpu"):
            out.append(skipped(f"fleet.{name}", chats, str(exc)))
        return out
    _, text = transcript_texts(deltas)
    out.extend(_core_asyncio(settings, chats, deltas, len(text)))
    try:
        cls = agent_class("asyncio")
    except BenchSkipped as exc:
        out.append(skipped("fleet.asyncio.memory", chats, str(exc)))
        out.append(skipped("fleet.asyncio.cpu", chats, str(exc)))
        return out
    raise_fd_limit()
    try:
        pace = fleet_chunk_delay(chats)
        with ServerProcess(deltas, chunk_delay=pace) as server:
            single = _agent_single_cpu(cls, server.info, max(settings.e2e_rounds, 1))
        # Every stream should be open before the first run starts (the report's open time
        # shows the margin: about 5 s for 1,000 agents sharing one client).
        with ServerProcess(deltas, start_delay=2.0 + 0.02 * chats, chunk_delay=pace) as server:
            measured = _agent_fleet(cls, server.info, chats, timeout=900.0)
    except Exception as exc:  # the adapter under test failed: report it, go on
        reason = (
            str(exc) if isinstance(exc, BenchSkipped) else f"failed: {type(exc).__name__}: {exc}"
        )
        out.append(skipped("fleet.asyncio.memory", chats, reason))
        out.append(skipped("fleet.asyncio.cpu", chats, reason))
        return out
    per_chat = max(measured["rss_per_chat"], measured["traced_per_chat"])
    shared = "agents share one CoderChatClient"
    out.append(
        Result(
            "fleet.asyncio.memory",
            chats,
            measured["open_s"],
            None,
            per_chat / MEMORY_TARGET,
            {
                "bytes_per_chat": round(per_chat),
                "rss_bytes_per_chat": round(measured["rss_per_chat"]),
                "traced_bytes_per_chat": round(measured["traced_per_chat"]),
                "target": "<= 64 KiB per open chat",
                "meets_target": per_chat <= MEMORY_TARGET,
                "via": shared,
            },
        )
    )
    fleet_per_chat = measured["cpu"] / chats
    ratio = fleet_per_chat / single if single > 0 else None
    out.append(
        Result(
            "fleet.asyncio.cpu",
            chats,
            measured["cpu"],
            single * chats,
            ratio,
            {
                "per_delta_us": fleet_per_chat / deltas * 1e6,
                "pace_s": pace,
                "single_per_delta_us": single / deltas * 1e6,
                "text_chars_ok": measured["chars"] == chats * len(text),
                "streamed_chats": measured["streamed"],
                "target": f"<= {CPU_TARGET}x one chat",
                **_cpu_verdict(ratio, measured["streamed"], chats),
                "via": shared + "; CPU from every stream open to the end",
            },
        )
    )
    return out
