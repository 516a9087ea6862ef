"""The activities in this process, on Temporal's activity test environment (no Temporal
server) against the fake Coder server: heartbeats with progress, cancellation as an
interrupt of the server's run, and errors raised as Temporal's retry rules want them."""

from __future__ import annotations

import asyncio
import os
import tempfile
from typing import Any

import pytest
from temporalio.exceptions import ApplicationError
from temporalio.testing import ActivityEnvironment

from coder_io_asyncio.temporal import (
    ArchiveRequest,
    DurableActivities,
    SweepRequest,
    TurnRequest,
)
from coder_io_common.stores import SQLiteStore

from .harness import add_scripts, fake_server

pytestmark = pytest.mark.timeout(120)


def _activities(server: Any, store: Any) -> DurableActivities:
    return DurableActivities(
        store=store,
        base_url=server.url,
        token=server.token,
        organization_id=server.organization_id,
        heartbeat_interval=0.05,
        request_timeout=30.0,
        settle_retry_delay=0.05,
        archive_options={"settle_retry_delay": 0.05},
        sweep_options={"settle_retry_delay": 0.05},
    )


def test_turn_archive_and_sweep_heartbeat() -> None:
    with tempfile.TemporaryDirectory() as tmp, fake_server() as server:
        add_scripts(server)
        store = SQLiteStore(os.path.join(tmp, "store.sqlite3"))
        beats: list[Any] = []
        env = ActivityEnvironment()
        env.on_heartbeat = lambda *details: beats.append(details[0])

        async def run() -> tuple[Any, Any, Any]:
            async with _activities(server, store) as activities:
                turn = await env.run(
                    activities.run_turn, TurnRequest("wf-1", "Confirm the order.", step="confirm")
                )
                archived = await env.run(activities.archive_workflow, ArchiveRequest("wf-1"))
                swept = await env.run(activities.sweep_orphans, SweepRequest())
            return turn, archived, swept

        try:
            turn, archived, swept = asyncio.run(run())
        finally:
            store.close()
        assert (turn.text, turn.recovered, turn.step, turn.attempt) == (
            "Order confirmed.",
            False,
            "[wf-1/confirm]",
            1,
        )
        assert archived.archived and archived.chat_id == turn.chat_id
        assert swept.archived_chat_ids == [] and swept.failed_chat_ids == []
        steps = {beat["step"] for beat in beats}
        assert steps == {"confirm", "archive", "sweep"}, beats
        assert all(beat["attempt"] == 1 for beat in beats), beats


def test_cancellation_interrupts_the_run() -> None:
    with tempfile.TemporaryDirectory() as tmp, fake_server(chunk_delay=0.01) as server:
        add_scripts(server)
        store = SQLiteStore(os.path.join(tmp, "store.sqlite3"))
        env = ActivityEnvironment()
        streaming = asyncio.Event()

        def beat(details: dict[str, Any]) -> None:
            if details["events"] > 3:
                streaming.set()

        env.on_heartbeat = beat

        async def run() -> None:
            async with _activities(server, store) as activities:
                task = asyncio.ensure_future(
                    env.run(activities.run_turn, TurnRequest("wf-2", "Write slowly.", step="s"))
                )
                await asyncio.wait_for(streaming.wait(), 30)
                env.cancel()
                with pytest.raises(asyncio.CancelledError):
                    await task

        try:
            asyncio.run(run())
            chat_id = store.get_checkpoint("default", "wf-2").chat_id
        finally:
            store.close()
        assert server.counters.requests["interrupt_chat"] >= 1
        assert server.model.chats[chat_id].status != "running"


@pytest.mark.parametrize("activity", ["run_turn", "archive_workflow", "sweep_orphans"])
def test_a_refused_request_is_not_retryable(activity: str) -> None:
    with tempfile.TemporaryDirectory() as tmp, fake_server() as server:
        add_scripts(server)
        store = SQLiteStore(os.path.join(tmp, "store.sqlite3"))
        env = ActivityEnvironment()

        async def run() -> None:
            async with _activities(server, store) as activities:
                await env.run(activities.run_turn, TurnRequest("wf-3", "Confirm the order."))
                server.faults.fail_requests("*", 403, times=None)
                request: Any = {
                    "run_turn": TurnRequest("wf-3", "Confirm the order again."),
                    "archive_workflow": ArchiveRequest("wf-3"),
                    "sweep_orphans": SweepRequest(),
                }[activity]
                await env.run(getattr(activities, activity), request)

        try:
            with pytest.raises(ApplicationError) as raised:
                asyncio.run(run())
        finally:
            store.close()
        assert raised.value.type == "CoderApiError"
        assert raised.value.non_retryable
        assert raised.value.details[0]["status"] == 403


def test_other_errors_reach_temporal_unchanged() -> None:
    class BrokenStore:
        def __getattr__(self, name: str) -> Any:
            raise RuntimeError("broken")

    with fake_server() as server:
        env = ActivityEnvironment()

        async def run() -> None:
            async with _activities(server, BrokenStore()) as activities:
                await env.run(activities.run_turn, TurnRequest("wf-4", "Hello."))

        with pytest.raises(RuntimeError, match="broken"):
            asyncio.run(run())
