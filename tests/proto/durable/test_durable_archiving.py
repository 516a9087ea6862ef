"""The workflow's end of life: archive at the end only, and the orphan sweep
(docs/durable-workflows.md: "Archive at the end — and only at the end", "Recover after a crash";
D4, D10)."""

from __future__ import annotations

import pytest

from coder_proto import CoderApiError
from coder_proto.durable import (
    ArchiveWorkflowResult,
    Checkpoint,
    JournalEntry,
    LedgerEntry,
    SweepResult,
)
from coder_proto.durable._archiving import ArchiveWorkflow, OrphanSweep, parse_timestamp
from coder_proto.fake import CallClientTool, Say, Script, Wait
from tests.durable.harness import WALL_OFFSET, World

T = "acme"
TOOL = {"name": "charge_card", "input_schema": {"type": "object"}}


def archive(world: World, workflow_id: str = "wf") -> ArchiveWorkflowResult:
    machine = ArchiveWorkflow(
        world.selector, tenant=T, workflow_id=workflow_id, now=world.now, retry_delay=0.05
    )
    assert "ArchiveWorkflow" in repr(machine)
    result: ArchiveWorkflowResult = world.drive(machine)
    return result


def sweep(world: World, **kwargs: float) -> SweepResult:
    machine = OrphanSweep(
        world.selector, now=world.now, wall=world.wall, retry_delay=0.05, **kwargs
    )
    assert "OrphanSweep" in repr(machine)
    result: SweepResult = world.drive(machine)
    return result


def archived(world: World, chat_id: str) -> bool:
    return bool(world.model.chats[chat_id].archived)


def test_a_workflow_without_a_chat_has_nothing_to_archive() -> None:
    world = World()
    assert archive(world) == ArchiveWorkflowResult(archived=False)
    assert world.sent == []


def test_archive_stops_a_live_run_archives_and_forgets_the_chat() -> None:
    world = World()
    chat = world.create_chat("[wf/s] go", script=Script((Say("start"), Wait(30.0))))
    world.advance(0.2)
    world.store.put_checkpoint(T, "wf", Checkpoint(chat_id=chat))
    world.store.put_ledger(T, chat, "call", LedgerEntry.done("x"))
    world.store.put_journal(T, chat, JournalEntry(state="resumed", marker="m", attempt=1, at=0.0))
    result = archive(world)
    assert result == ArchiveWorkflowResult(archived=True, chat_id=chat, archived_chat_ids=(chat,))
    assert "interrupt_chat" in world.ops() and archived(world, chat)
    assert world.store.get_checkpoint(T, "wf") is None
    assert world.store.get_ledger(T, chat, "call") is None
    assert world.store.get_journal(T, chat) is None


def test_archive_retires_a_paused_chat_with_d4s_follow_up_and_every_stranded_chat() -> None:
    world = World()
    paused = world.create_chat(
        "[wf/s] go", script=Script((CallClientTool(name="charge_card"),)), tools=[TOOL]
    )
    world.settle_server(paused)
    stranded = world.create_chat("[wf/s] lost", script=Script((Say("bye"),)))
    world.settle_server(stranded)
    world.store.put_checkpoint(T, "wf", Checkpoint(chat_id=paused))
    world.store.add_stranded(T, "wf", stranded)
    world.store.add_stranded(T, "other-wf", "someone-elses")
    result = archive(world)
    assert result.archived_chat_ids == (stranded, paused)
    assert world.ops().count("interrupt_chat") == 2  # D4: the paused chat resumed running
    assert archived(world, paused) and archived(world, stranded)
    assert [s.chat_id for s in world.store.stranded_chats(T)] == ["someone-elses"]


def test_an_already_archived_chat_is_success_and_a_missing_stranded_chat_is_dropped() -> None:
    world = World()
    chat = world.create_chat("[wf/s] go", script=Script((Say("done"),)))
    world.settle_server(chat)
    world.http("PATCH", f"/{chat}", {"archived": True})
    world.store.put_checkpoint(T, "wf", Checkpoint(chat_id=chat))
    world.store.add_stranded(T, "wf", "00000000-0000-4000-8000-000000000000")
    result = archive(world)
    assert result.archived_chat_ids == (chat,)
    assert "interrupt_chat" not in world.ops()
    assert world.store.stranded_chats(T) == ()


def test_archive_failures_are_raised_at_the_end_and_keep_the_store() -> None:
    world = World()
    chat = world.create_chat("[wf/s] go", script=Script((Say("done"),)))
    world.settle_server(chat)
    world.store.put_checkpoint(T, "wf", Checkpoint(chat_id=chat))
    world.store.add_stranded(T, "wf", "not-a-uuid")
    world.model.faults.fail_requests("archive_chat", status=500, times=None)
    with pytest.raises(CoderApiError) as info:
        archive(world)
    assert info.value.status in (400, 404, 500)
    assert any("also failed" in note for note in getattr(info.value, "__notes__", []))
    assert world.store.get_checkpoint(T, "wf") is not None


def test_the_sweep_retires_every_chat_no_checkpoint_accounts_for_whatever_its_status() -> None:
    world = World()
    kept = world.create_chat("[wf/s] kept", script=Script((Say("hi"),)))
    orphan_done = world.create_chat("[wf2/s] done", script=Script((Say("hi"),)))
    orphan_paused = world.create_chat(
        "[wf3/s] paused", script=Script((CallClientTool(name="charge_card"),)), tools=[TOOL]
    )
    for chat in (kept, orphan_done, orphan_paused):
        world.settle_server(chat)
    gone = world.create_chat("[wf4/s] archived", script=Script((Say("x"),)))
    world.settle_server(gone)
    world.http("PATCH", f"/{gone}", {"archived": True})
    world.store.put_checkpoint("other-tenant", "wf", Checkpoint(chat_id=kept))
    world.store.add_stranded(T, "wf3", orphan_paused)
    result = sweep(world, page_size=1)  # type: ignore[arg-type]
    assert sorted(result.archived_chat_ids) == sorted([orphan_done, orphan_paused])
    assert result.accounted == 1 and result.failed == ()
    assert not archived(world, kept)
    assert archived(world, orphan_done) and archived(world, orphan_paused)
    assert world.store.stranded_chats() == ()


def test_the_sweep_keeps_young_chats_with_min_age_and_reports_failures() -> None:
    world = World(wall_clock_offset=WALL_OFFSET)
    young = world.create_chat("[wf/s] young", script=Script((Say("hi"),)))
    world.settle_server(young)
    result = sweep(world, min_age=3600.0)
    assert result.skipped_chat_ids == (young,) and result.archived_chat_ids == ()
    world.model.faults.fail_requests("archive_chat", status=500, times=None)
    result = sweep(world)
    assert [chat for chat, _ in result.failed] == [young]
    assert not archived(world, young)


def test_the_sweep_validates_min_age() -> None:
    world = World()
    with pytest.raises(Exception, match="min_age"):
        OrphanSweep(world.selector, now=0.0, wall=0.0, min_age=-1)


def test_rfc3339_timestamps() -> None:
    assert parse_timestamp("1970-01-01T00:00:00Z") == 0.0
    assert parse_timestamp("2026-01-01T00:00:00.5Z") == 1_767_225_600.5
    assert parse_timestamp("2026-01-01T02:00:00+02:00") == 1_767_225_600.0
    assert parse_timestamp("2025-12-31T22:00:00-02:00") == 1_767_225_600.0
    assert parse_timestamp("2024-02-29T12:00:00z") == 1_709_208_000.0
    for bad in ("", "yesterday", "2026-13-01T00:00:00Z", "2026-01-01T25:00:00Z", None):
        assert parse_timestamp(bad) is None  # type: ignore[arg-type]


def test_a_failing_interrupt_before_archiving_is_logged_and_the_archive_tried() -> None:
    world = World()
    chat = world.create_chat("[wf/s] go", script=Script((Say("start"), Wait(0.5))))
    world.advance(0.1)
    world.store.put_checkpoint(T, "wf", Checkpoint(chat_id=chat))
    world.model.faults.fail_requests("interrupt_chat", status=500)
    assert archive(world).archived_chat_ids == (chat,)
    assert archived(world, chat)


def test_an_unanswered_target_is_a_failure_raised_at_the_end() -> None:
    world = World()
    chat = world.create_chat("[wf/s] go", script=Script((Say("start"), Wait(1000.0))))
    world.advance(0.1)
    world.store.put_checkpoint(T, "wf", Checkpoint(chat_id=chat))
    world.model.config.interrupt_delay = 1000.0
    with pytest.raises(CoderApiError) as info:
        archive(world)
    assert info.value.status == 409  # still winding down when the budget ran out


def test_an_unknown_creation_time_keeps_a_chat_out_of_an_aged_sweep() -> None:
    world = World()
    chat = world.create_chat("[wf/s] x", script=Script((Say("hi"),)))
    world.settle_server(chat)
    world.model.chats[chat].created_at = "not a time"
    assert sweep(world, min_age=1.0).skipped_chat_ids == (chat,)


def test_network_failures_interrupting_and_archiving() -> None:
    """An interrupt lost to the network is logged and the archive still tried; an archive lost
    to the network is a failure raised at the end (the store keeps the chat)."""
    world = World()
    chat = world.create_chat("[wf/s] go", script=Script((Say("start"), Wait(0.3))))
    world.advance(0.1)
    world.store.put_checkpoint(T, "wf", Checkpoint(chat_id=chat))
    world.fail_network = lambda r: "connection reset" if r.op == "interrupt_chat" else None  # type: ignore[assignment]
    assert archive(world).archived_chat_ids == (chat,)
    world2 = World()
    chat2 = world2.create_chat("[wf/s] go", script=Script((Say("x"),)))
    world2.settle_server(chat2)
    world2.store.put_checkpoint(T, "wf", Checkpoint(chat_id=chat2))
    world2.fail_network = lambda r: "connection reset" if r.op == "archive_chat" else None  # type: ignore[assignment]
    with pytest.raises(Exception, match="connection reset"):
        archive(world2)
    assert world2.store.get_checkpoint(T, "wf") is not None


def test_a_chat_already_winding_down_is_archived_once_settled() -> None:
    """The probe sees ``interrupting``: the interrupt 409s (nothing left to stop) and the
    archive's 409 loop waits out the wind-down (D10)."""
    world = World(interrupt_delay=0.3)
    chat = world.create_chat("[wf/s] go", script=Script((Say("start"), Wait(30.0))))
    world.advance(0.1)
    world.http("POST", f"/{chat}/interrupt")
    world.store.put_checkpoint(T, "wf", Checkpoint(chat_id=chat))
    assert archive(world).archived_chat_ids == (chat,)
    assert [s.status for s in world.sent if s.op == "interrupt_chat"] == [409]
