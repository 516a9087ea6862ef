"""Recovery before resubmitting, branch by branch (docs/durable-workflows.md: "Recover after a
crash", "Make client tools crash-safe", "Recover the result before resubmitting"; D1, D4,
D26), driven in memory against the pure fake server model."""

from __future__ import annotations

from typing import Any

import pytest

from coder_proto import CoderAgentError, ToolCall
from coder_proto._actions import ToolOutcome
from coder_proto.durable import (
    CUT_SHORT,
    RESUMED,
    SUBMITTING,
    DurableStoreError,
    JournalEntry,
    LedgerEntry,
    RecoveryError,
)
from coder_proto.durable._recovery import NOT_EXECUTED_MESSAGE, Recovery, RecoveryOutcome
from coder_proto.durable._scan import step_marker
from coder_proto.fake import CallClientTool, CallServerTool, Fail, Say, Script, Wait
from tests.durable.harness import World

TENANT = "acme"
MARKER = step_marker("wf-1", "pay")
CHARGE = {
    "name": "charge_card",
    "description": "Charge the card.",
    "input_schema": {"type": "object", "properties": {"amount_cents": {"type": "integer"}}},
}
NOTIFY = {
    "name": "notify",
    "description": "Notify someone.",
    "input_schema": {"type": "object", "properties": {"to": {"type": "string"}}},
}


def pay_script(*extra: Any) -> Script:
    return Script(
        (
            Say("Charging now."),
            CallClientTool(name="charge_card", args={"amount_cents": 500}),
            *extra,
            Say("Charged: {tool_result}"),
        )
    )


def recovery(world: World, chat_id: str, **kwargs: Any) -> Recovery:
    kwargs.setdefault("client_tools", {"charge_card", "notify"})
    kwargs.setdefault("commit_window", 30.0)
    kwargs.setdefault("poll_interval", 0.25)
    return Recovery(
        world.selector,
        chat_id=chat_id,
        marker=kwargs.pop("marker", MARKER),
        now=world.now,
        wall=world.wall,
        tenant=TENANT,
        **kwargs,
    )


def paused_chat(world: World, script: Script | None = None, tools: Any = (CHARGE,)) -> str:
    chat = world.create_chat(
        f"{MARKER} charge the card", script=script or pay_script(), tools=tools
    )
    assert world.settle_server(chat) == "requires_action"
    return chat


def pending_ids(world: World, chat_id: str) -> list[str]:
    return [c["tool_call_id"] for c in world.model.chats[chat_id].pending_tool_calls()]


def redrive(world: World, calls: tuple[ToolCall, ...]) -> list[ToolOutcome]:
    out = []
    for call in calls:
        world.store.put_ledger(
            TENANT, world.current_chat, call.tool_call_id, LedgerEntry.done("r-2")
        )
        out.append(ToolOutcome(tool_call_id=call.tool_call_id, output="charged: receipt r-2"))
    return out


# -- a requires_action pause is reconciled, never interrupted away ---------------------------------


def test_done_entry_submits_the_recorded_output_and_recovers_the_result() -> None:
    """Ledger ``done``: submit the recorded output, nothing re-executes, no interrupt; the
    revived run finishes and its final text (after the client tool) is the step's result."""
    world = World()
    chat = paused_chat(world)
    (call_id,) = pending_ids(world, chat)
    world.store.put_ledger(TENANT, chat, call_id, LedgerEntry.done("charged: receipt r-1"))
    outcome: RecoveryOutcome = world.drive(recovery(world, chat))
    assert world.bodies("submit_tool_results") == [
        {
            "results": [
                {"tool_call_id": call_id, "output": "charged: receipt r-1", "is_error": False}
            ]
        }
    ]
    assert "interrupt_chat" not in world.ops()
    assert world.tool_runs == []
    assert outcome.recovered and outcome.finished and not outcome.cut_short
    assert outcome.text == 'Charged: "charged: receipt r-1"'
    journal = world.store.get_journal(TENANT, chat)
    assert journal is not None and journal.state == RESUMED and journal.marker == MARKER
    assert journal.attempt == 1


def test_committing_entry_is_redriven_with_the_tool_and_its_output_submitted() -> None:
    """Ledger ``committing``: re-drive (one ``RunTools`` with the call from history, its
    args as JSON text) and submit what it returns."""
    world = World()
    chat = paused_chat(world)
    world.current_chat = chat  # type: ignore[attr-defined]
    (call_id,) = pending_ids(world, chat)
    world.store.put_ledger(TENANT, chat, call_id, LedgerEntry.committing())
    outcome = world.drive(recovery(world, chat), tools=lambda calls: redrive(world, calls))
    (calls,) = world.tool_runs
    assert [(c.tool_call_id, c.tool_name, c.input) for c in calls] == [
        (call_id, "charge_card", '{"amount_cents":500}')
    ]
    assert world.bodies("submit_tool_results")[0]["results"][0]["output"] == "charged: receipt r-2"
    assert outcome.recovered and outcome.text.startswith("Charged:")


def test_the_verdict_is_journaled_before_any_request_of_the_pass() -> None:
    """D26: one batch verdict, written ahead of the submission."""
    world = World()
    chat = paused_chat(world)
    (call_id,) = pending_ids(world, chat)
    world.store.put_ledger(TENANT, chat, call_id, LedgerEntry.done("ok"))
    order: list[str] = []
    original_respond = world._respond

    def respond(request: Any) -> Any:
        order.append(request.op)
        return original_respond(request)

    def fail_store(op: Any) -> None:
        order.append(op.method)

    world._respond = respond  # type: ignore[method-assign]
    world.fail_store = fail_store  # type: ignore[assignment]
    world.drive(recovery(world, chat))
    assert order.index("put_journal") < order.index("submit_tool_results")


def test_unstarted_calls_only_interrupt_with_d4_follow_up_and_resubmit() -> None:
    """No ledger entry: the tool never ran. Every call unstarted: journal ``cut-short``,
    interrupt (D4: the paused chat resumes ``running`` with cancellations, so a follow-up
    interrupt), no submission; the step must resubmit."""
    world = World()
    chat = paused_chat(world)
    outcome = world.drive(recovery(world, chat))
    assert world.ops().count("interrupt_chat") == 2
    assert "submit_tool_results" not in world.ops()
    assert outcome.cut_short and not outcome.recovered and outcome.submitted
    assert outcome.attempts == 1
    journal = world.store.get_journal(TENANT, chat)
    assert journal is not None and journal.state == CUT_SHORT


def test_mixed_batch_submits_one_complete_set_then_interrupts() -> None:
    """D26: a done call and an unstarted sibling. One complete set (the recorded output, and
    the "not executed" error result), journaled ``cut-short`` first, then an interrupt."""
    world = World()
    script = Script(
        (
            CallClientTool(name="charge_card", args={"amount_cents": 1}),
            CallClientTool(name="notify", args={"to": "ops"}),
            Say("done"),
        )
    )
    chat = paused_chat(world, script, tools=(CHARGE, NOTIFY))
    charge_id, notify_id = pending_ids(world, chat)
    world.store.put_ledger(TENANT, chat, charge_id, LedgerEntry.done("r-9"))
    outcome = world.drive(recovery(world, chat))
    assert world.bodies("submit_tool_results") == [
        {
            "results": [
                {"tool_call_id": charge_id, "output": "r-9", "is_error": False},
                {"tool_call_id": notify_id, "output": NOT_EXECUTED_MESSAGE, "is_error": True},
            ]
        }
    ]
    ops = world.ops()
    assert ops.index("submit_tool_results") < ops.index("interrupt_chat")
    assert outcome.cut_short and not outcome.recovered
    journal = world.store.get_journal(TENANT, chat)
    assert journal is not None and journal.state == CUT_SHORT


def test_a_failed_redrive_leaves_the_pause_and_raises() -> None:
    """A ``committing`` call whose re-drive fails may have committed: never answer it with an
    error (the model could call again under a new key); leave the pause for later."""
    world = World()
    chat = paused_chat(world)
    (call_id,) = pending_ids(world, chat)
    world.store.put_ledger(TENANT, chat, call_id, LedgerEntry.committing())

    def broken(calls: tuple[ToolCall, ...]) -> list[ToolOutcome]:
        return [ToolOutcome(tool_call_id=calls[0].tool_call_id, output="boom", is_error=True)]

    with pytest.raises(RecoveryError, match="re-driving"):
        world.drive(recovery(world, chat), tools=broken)
    assert "submit_tool_results" not in world.ops()
    assert world.status(chat) == "requires_action"


def test_a_pause_for_tools_this_step_does_not_configure_is_interrupted() -> None:
    """History cannot tell client from server calls; a pause whose calls are not configured
    here cannot be answered, so it is stopped and the attempt counts as cut short."""
    world = World()
    chat = paused_chat(world)
    outcome = world.drive(recovery(world, chat, client_tools={"other"}))
    assert "interrupt_chat" in world.ops()
    assert outcome.cut_short


def test_a_stable_pause_in_the_settle_poll_is_reconciled_again() -> None:
    """The revived run calls a new client tool: ``requires_action`` with nothing cut short is a
    stable pause; reconcile again (the new call has no entry: interrupt, cut short)."""
    world = World()
    script = Script(
        (
            CallClientTool(name="charge_card", args={"amount_cents": 1}),
            Say("now notify"),
            CallClientTool(name="notify", args={"to": "ops"}),
            Say("all done"),
        )
    )
    chat = paused_chat(world, script, tools=(CHARGE, NOTIFY))
    (charge_id,) = pending_ids(world, chat)
    world.store.put_ledger(TENANT, chat, charge_id, LedgerEntry.done("r-1"))
    outcome = world.drive(recovery(world, chat))
    assert outcome.reconciled == 2
    assert outcome.cut_short and not outcome.recovered
    assert world.status(chat) == "waiting"


def test_submission_refused_with_400_raises_recovery_error() -> None:
    world = World()
    chat = paused_chat(world)
    (call_id,) = pending_ids(world, chat)
    world.store.put_ledger(TENANT, chat, call_id, LedgerEntry.done("x"))
    world.model.faults.fail_requests("submit_tool_results", status=400)
    with pytest.raises(RecoveryError, match="refused"):
        world.drive(recovery(world, chat))


def test_submission_answered_409_counts_as_cut_short() -> None:
    """A 409: the pause was answered or cancelled meanwhile (D6); none of ours applied."""
    world = World()
    chat = paused_chat(world)
    (call_id,) = pending_ids(world, chat)
    world.store.put_ledger(TENANT, chat, call_id, LedgerEntry.done("x"))
    world.model.faults.fail_requests("submit_tool_results", status=409)
    outcome = world.drive(recovery(world, chat))
    assert outcome.cut_short and not outcome.recovered


# -- the settle-wait's other branches ----------------------------------------------------------------


def finished_chat(
    world: World, prompt: str = f"{MARKER} hello", script: Script | None = None
) -> str:
    chat = world.create_chat(prompt, script=script or Script((Say("All good."),)))
    assert world.settle_server(chat) == "waiting"
    return chat


def test_a_finished_attempt_is_recovered_after_the_interrupts_409() -> None:
    """Hard crash after the turn finished: the interrupt 409s (nothing running, the probe
    saw no ``interrupting``), so nothing was cut short; the result comes from history."""
    world = World()
    chat = finished_chat(world)
    outcome = world.drive(recovery(world, chat))
    assert outcome.recovered and outcome.text == "All good."
    assert outcome.status == "waiting" and not outcome.cut_short


def test_a_live_run_is_interrupted_polled_to_settled_and_resubmitted() -> None:
    world = World()
    chat = world.create_chat(f"{MARKER} go", script=Script((Say("start"), Wait(30.0), Say("end"))))
    world.advance(0.5)
    assert world.status(chat) == "running"
    outcome = world.drive(recovery(world, chat))
    assert world.ops().count("interrupt_chat") == 1
    assert outcome.cut_short and not outcome.recovered
    assert outcome.status in ("waiting", "completed", "error")


def test_a_probed_interrupting_status_keeps_cut_short_despite_the_409() -> None:
    """An earlier interrupt (a timeout's, a sweeper's) already truncated the attempt."""
    world = World(interrupt_delay=5.0)
    chat = world.create_chat(f"{MARKER} go", script=Script((Say("start"), Wait(30.0), Say("end"))))
    world.advance(0.5)
    world.http("POST", f"/{chat}/interrupt")
    assert world.status(chat) == "interrupting"
    outcome = world.drive(recovery(world, chat))
    assert outcome.cut_short and not outcome.recovered


def test_journaled_resumed_lets_the_revived_run_finish() -> None:
    """A previous pass submitted recorded results and died: interrupting now would cut down a
    run doing the step's work. No interrupt; the finished run's result is recovered."""
    world = World()
    chat = paused_chat(world, pay_script(Wait(2.0)))
    (call_id,) = pending_ids(world, chat)
    world.http(
        "POST", f"/{chat}/tool-results", {"results": [{"tool_call_id": call_id, "output": "r"}]}
    )
    world.store.put_journal(
        TENANT, chat, JournalEntry(state=RESUMED, marker=MARKER, attempt=1, at=world.wall)
    )
    assert world.status(chat) == "running"
    outcome = world.drive(recovery(world, chat))
    assert "interrupt_chat" not in world.ops()
    assert outcome.recovered and not outcome.cut_short


def test_journaled_cut_short_redrives_the_interrupt() -> None:
    """The journal records intent, not a landed interrupt: make it true."""
    world = World()
    chat = world.create_chat(f"{MARKER} go", script=Script((Say("start"), Wait(30.0), Say("end"))))
    world.advance(0.5)
    world.store.put_journal(
        TENANT, chat, JournalEntry(state=CUT_SHORT, marker=MARKER, attempt=1, at=world.wall)
    )
    outcome = world.drive(recovery(world, chat))
    assert world.ops().count("interrupt_chat") == 1
    assert outcome.cut_short and not outcome.recovered


def test_journaled_cut_short_on_a_settled_chat_keeps_the_verdict() -> None:
    """A 409 on the re-driven interrupt means the chat settled already; the verdict stands."""
    world = World()
    chat = finished_chat(world)
    world.store.put_journal(
        TENANT, chat, JournalEntry(state=CUT_SHORT, marker=MARKER, attempt=1, at=world.wall)
    )
    outcome = world.drive(recovery(world, chat))
    assert outcome.cut_short and not outcome.recovered


def test_an_entry_of_another_attempt_or_step_does_not_apply() -> None:
    """Journal scoping: a verdict from attempt N never classifies attempt N+1, and another
    step's entry never classifies this one."""
    world = World()
    chat = finished_chat(world)
    world.store.put_journal(
        TENANT, chat, JournalEntry(state=CUT_SHORT, marker=MARKER, attempt=0, at=world.wall)
    )
    outcome = world.drive(recovery(world, chat))
    assert outcome.recovered  # the stale cut-short verdict was ignored
    other = World()
    chat2 = finished_chat(other)
    other.store.put_journal(
        TENANT,
        chat2,
        JournalEntry(state=CUT_SHORT, marker="[wf-1/other]", attempt=1, at=other.wall),
    )
    assert other.drive(recovery(other, chat2)).recovered


def test_an_unlanded_first_send_sleeps_out_its_commit_window_then_resubmits() -> None:
    """A matching ``submitting`` entry (attempt 0): the crashed attempt's send may still land.
    Recovery sleeps out what remains of its window (anchored at the entry's wall-clock write
    time), recounts, and resubmits when nothing landed."""
    world = World()
    chat = finished_chat(world, prompt="[wf-1/plan] an earlier step")
    world.store.put_journal(
        TENANT, chat, JournalEntry(state=SUBMITTING, marker=MARKER, attempt=0, at=world.wall - 10.0)
    )
    started = world.now
    outcome = world.drive(recovery(world, chat, commit_window=30.0))
    assert world.now - started >= 20.0
    assert not outcome.submitted and not outcome.recovered
    assert outcome.attempts == 0


def test_a_commit_window_already_past_is_not_slept() -> None:
    world = World()
    chat = finished_chat(world, prompt="[wf-1/plan] an earlier step")
    world.store.put_journal(
        TENANT, chat, JournalEntry(state=SUBMITTING, marker=MARKER, attempt=0, at=world.wall - 99.0)
    )
    started = world.now
    world.drive(recovery(world, chat, commit_window=30.0, poll_interval=0.01))
    assert world.now - started < 1.0


def test_a_skewed_future_write_time_never_extends_the_window() -> None:
    world = World()
    chat = finished_chat(world, prompt="[wf-1/plan] an earlier step")
    world.store.put_journal(
        TENANT, chat, JournalEntry(state=SUBMITTING, marker=MARKER, attempt=0, at=world.wall + 1e6)
    )
    started = world.now
    world.drive(recovery(world, chat, commit_window=3.0))
    assert world.now - started < 5.0


def test_an_unlanded_send_over_an_existing_attempt_pins_cut_short() -> None:
    """The step only resends over a cut-short, errored or unsubmitted attempt: the old
    attempt's tail must not be mistaken for a finished result."""
    world = World()
    chat = finished_chat(world)
    world.store.put_journal(
        TENANT, chat, JournalEntry(state=SUBMITTING, marker=MARKER, attempt=1, at=world.wall)
    )
    outcome = world.drive(recovery(world, chat, commit_window=1.0))
    assert outcome.cut_short and not outcome.recovered and outcome.attempts == 1


def test_a_send_that_lands_inside_the_window_is_waited_for_and_recovered() -> None:
    """The crashed attempt's create-message lands late: its run starts before the settle poll,
    which waits for it; the step's prompt is then the newest user message."""
    world = World()
    chat = finished_chat(world, prompt="[wf-1/plan] an earlier step")
    world.store.put_journal(
        TENANT, chat, JournalEntry(state=SUBMITTING, marker=MARKER, attempt=0, at=world.wall)
    )
    machine = recovery(world, chat, commit_window=5.0)
    # Drive the probe phase, then let the late send land while recovery sleeps.
    for action in machine.actions():
        world._perform(machine, action, None)
    for _ in range(20):
        for action in machine.actions():
            world._perform(machine, action, None)
    world.send(chat, f"{MARKER} late", script=Script((Say("late answer"),)))
    outcome = world.drive(machine)
    assert outcome.attempts == 1 and outcome.submitted
    assert outcome.recovered and outcome.text == "late answer"


def test_pin_cut_short_after_a_known_timeout_resubmits_a_finished_looking_attempt() -> None:
    """After the step's own timeout fired an interrupt, a 409 proves nothing."""
    world = World()
    chat = finished_chat(world)
    outcome = world.drive(recovery(world, chat, pin_cut_short=True))
    assert outcome.cut_short and not outcome.recovered and outcome.submitted


def test_an_errored_attempt_resubmits_with_the_chat_error() -> None:
    world = World()
    chat = world.create_chat(f"{MARKER} go", script=Script((Fail(message="provider down"),)))
    assert world.settle_server(chat) == "error"
    outcome = world.drive(recovery(world, chat))
    assert not outcome.recovered and outcome.status == "error"
    assert outcome.last_error is not None and outcome.last_error.message == "provider down"


def test_never_submitted_step_resubmits() -> None:
    world = World()
    chat = finished_chat(world, prompt="[wf-1/plan] an earlier step")
    outcome = world.drive(recovery(world, chat))
    assert not outcome.submitted and not outcome.recovered and outcome.attempts == 0


def test_attempts_are_counted_across_pages_newest_first() -> None:
    """Never conclude from a truncated read: with tiny pages, the scan pages back past the
    step's earlier attempts and stops at the first user message without the marker."""
    world = World()
    chat = finished_chat(world, prompt="[wf-1/plan] first step")
    for n in range(3):
        world.send(chat, f"{MARKER} attempt {n}", script=Script((Say(f"answer {n}"),)))
        world.settle_server(chat)
    outcome = world.drive(recovery(world, chat, page_size=2))
    assert outcome.attempts == 3
    assert outcome.recovered and outcome.text == "answer 2"
    pages = [s.path for s in world.sent if s.op == "get_messages"]
    assert any("before_id" in p for p in pages)


def test_the_text_cut_keeps_narration_before_a_trailing_server_tool() -> None:
    """Only a client tool ends a step: narration around a server call stays in the result."""
    world = World()
    script = Script(
        (
            CallClientTool(name="charge_card", args={"amount_cents": 1}),
            Say("Before search. "),
            CallServerTool(name="web_search", args={"q": "x"}, result={"hits": 1}),
            Say("After search."),
        )
    )
    chat = paused_chat(world, script)
    (call_id,) = pending_ids(world, chat)
    world.store.put_ledger(TENANT, chat, call_id, LedgerEntry.done("ok"))
    outcome = world.drive(recovery(world, chat))
    assert outcome.text == "Before search. After search."


class _Answer:
    """A structured-output helper for tests: answers are objects with an int ``n``."""

    name = "structured_output"

    def parse(self, call: ToolCall) -> Any:
        import json

        value = json.loads(call.input)
        if not isinstance(value.get("n"), int):
            raise CoderAgentError("n must be an integer")
        return value["n"]

    def answer(self, call: ToolCall) -> ToolOutcome:
        return ToolOutcome(tool_call_id=call.tool_call_id, output="recorded")


STRUCTURED = {
    "name": "structured_output",
    "description": "File the answer.",
    "input_schema": {"type": "object", "properties": {"n": {}}},
}


def test_structured_output_recovers_the_newest_valid_filing() -> None:
    """The answer is the filed call's validated input; an invalid re-filing never shadows a
    valid one. A pending filing is answered as the live loop would (no ledger needed)."""
    world = World()
    script = Script(
        (
            CallClientTool(name="structured_output", args={"n": 7}),
            CallClientTool(name="structured_output", args={"n": "bad"}),
            Say("Filed."),
        )
    )
    chat = paused_chat(world, script, tools=(STRUCTURED,))
    outcome = world.drive(recovery(world, chat, structured=_Answer()))
    assert outcome.recovered and outcome.structured_found and outcome.structured == 7
    assert "interrupt_chat" not in world.ops()


def test_structured_step_without_a_valid_filing_is_not_recovered() -> None:
    world = World()
    chat = finished_chat(world)
    outcome = world.drive(recovery(world, chat, structured=_Answer()))
    assert outcome.finished and not outcome.recovered and not outcome.structured_found


# -- bounds and failures --------------------------------------------------------------------------------


def test_the_settle_poll_is_bounded_by_the_turn_scale_timeout() -> None:
    world = World(interrupt_delay=1000.0)
    chat = world.create_chat(f"{MARKER} go", script=Script((Wait(5000.0),)))
    world.advance(0.5)
    with pytest.raises(TimeoutError, match="did not settle"):
        world.drive(recovery(world, chat, settle_timeout=5.0))


def test_a_store_failure_raises_durable_store_error_with_the_cause() -> None:
    world = World()
    chat = finished_chat(world)
    world.fail_store = lambda op: OSError("disk full") if op.method == "get_journal" else None  # type: ignore[assignment]
    with pytest.raises(DurableStoreError, match="get_journal") as info:
        world.drive(recovery(world, chat))
    assert isinstance(info.value.__cause__, OSError)


def test_a_store_returning_the_wrong_type_is_a_store_error() -> None:
    class Broken:
        def __getattr__(self, name: str) -> Any:
            return lambda *args: "not a record"

    world = World(store=Broken())
    chat = finished_chat(world)
    with pytest.raises(DurableStoreError, match="returned str"):
        world.drive(recovery(world, chat))


def test_bad_arguments_raise_typed_errors() -> None:
    world = World()
    with pytest.raises(CoderAgentError, match="chat_id"):
        recovery(world, "")
    with pytest.raises(CoderAgentError, match="marker"):
        recovery(world, "c", marker="")
    with pytest.raises(CoderAgentError, match="poll_interval"):
        recovery(world, "c", poll_interval=-1)
    with pytest.raises(CoderAgentError, match="commit_window"):
        recovery(world, "c", commit_window=float("nan"))


def test_late_inputs_for_unknown_ids_are_ignored() -> None:
    world = World()
    chat = finished_chat(world)
    machine = recovery(world, chat)
    machine.store_result(999, None, world.now)
    machine.store_failed(999, OSError("x"), world.now)
    machine.tool_results([], world.now)
    assert "Recovery" in repr(machine)
    assert world.drive(machine).recovered


def test_an_archived_chat_is_only_read() -> None:
    """An archived chat runs nothing and accepts nothing: no interrupt, no reconciliation;
    a finished step's result still comes from its history."""
    world = World()
    chat = finished_chat(world)
    world.http("PATCH", f"/{chat}", {"archived": True})
    outcome = world.drive(recovery(world, chat))
    assert outcome.recovered and outcome.text == "All good."
    assert set(world.ops()) == {"get_chat", "get_messages"}


def test_an_interrupt_failing_otherwise_than_409_propagates() -> None:
    world = World()
    chat = finished_chat(world)
    world.model.faults.fail_requests("interrupt_chat", status=500)
    with pytest.raises(CoderAgentError) as info:
        world.drive(recovery(world, chat))
    assert getattr(info.value, "status", None) == 500


def test_a_single_tool_outcome_is_accepted() -> None:
    world = World()
    chat = paused_chat(world)
    world.current_chat = chat  # type: ignore[attr-defined]
    (call_id,) = pending_ids(world, chat)
    world.store.put_ledger(TENANT, chat, call_id, LedgerEntry.committing())

    def one(calls: tuple[ToolCall, ...]) -> Any:
        return ToolOutcome(tool_call_id=calls[0].tool_call_id, output="single")

    outcome = world.drive(recovery(world, chat), tools=one)
    assert outcome.recovered and outcome.text == 'Charged: "single"'


def test_a_past_step_reads_its_structured_answer() -> None:
    from coder_proto.durable._recovery import PastStep

    world = World()
    script = Script((CallClientTool(name="structured_output", args={"n": 3}), Say("Filed.")))
    chat = paused_chat(world, script, tools=(STRUCTURED,))
    (call_id,) = pending_ids(world, chat)
    world.http(
        "POST", f"/{chat}/tool-results", {"results": [{"tool_call_id": call_id, "output": "ok"}]}
    )
    world.settle_server(chat)
    world.send(chat, "[wf-1/later] next", script=Script((Say("later"),)))
    world.settle_server(chat)
    machine = PastStep(
        world.selector,
        chat_id=chat,
        marker=MARKER,
        now=world.now,
        wall=world.wall,
        tenant=TENANT,
        structured=_Answer(),
    )
    assert "PastStep" in repr(machine)
    outcome = world.drive(machine)
    assert outcome.recovered and outcome.structured == 3 and outcome.text == "Filed."
    assert set(world.ops()) == {"get_messages"}
