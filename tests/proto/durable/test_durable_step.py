"""One durable step, decision by decision (docs/durable-workflows.md: "Shape each step", "Recover
after a crash", "Recover the result before resubmitting"). The step program runs against the
pure fake server model; agent turns are played by the test (a turn posts the prompt and lets
the server answer, or fails as told)."""

from __future__ import annotations

import types
from typing import Any

import pytest

from coder_proto import CoderAgentError, CoderApiError, CoderChatError
from coder_proto.durable import (
    OUTCOME_ABORTED,
    OUTCOME_FAILED,
    OUTCOME_FINISHED,
    OUTCOME_IN_FLIGHT,
    SUBMITTING,
    Checkpoint,
    DurableStepResult,
    JournalEntry,
    RecoveryError,
)
from coder_proto.durable._scan import step_marker
from coder_proto.durable._step import (
    RunAgentTurn,
    StepPlan,
    TurnReport,
    latest_step,
    needs_recovery,
    step_program,
    turn_outcome,
)
from coder_proto.fake import Fail, Say, Script
from tests.durable.harness import World

T = "acme"
WF = "wf-7"


def plan(step: str, prompt: str = "do the thing", **kwargs: Any) -> StepPlan:
    kwargs.setdefault("poll_interval", 0.1)
    kwargs.setdefault("commit_window", 1.0)
    return StepPlan(workflow_id=WF, prompt=prompt, step=step, tenant=T, **kwargs)


class Agent:
    """Plays agent turns on the model: posts the prompt (creating the chat when there is
    none), lets the server answer, and reports like ``run_turn``'s adapter does."""

    def __init__(self, world: World, answer: str = "the answer") -> None:
        self.world = world
        self.answer = answer
        self.script: Script | None = None
        self.turns: list[RunAgentTurn] = []
        self.error: BaseException | None = None
        self.cancelled = False
        self.discard: bool = False

    def __call__(self, turn: RunAgentTurn) -> TurnReport:
        self.turns.append(turn)
        world = self.world
        script = self.script or Script((Say(self.answer),))
        if turn.chat_id is None:
            chat = world.create_chat(turn.prompt, script=script)
        else:
            chat = turn.chat_id
            world.send(chat, turn.prompt, script=script)
        world.settle_server(chat)
        newest = world.messages(chat)[-1]["id"]
        if self.discard:
            return TurnReport(error=self.error, stranded_chat_ids=(chat,))
        if self.error is not None:
            return TurnReport(
                error=self.error,
                cancelled=self.cancelled,
                chat_id=chat,
                last_seen_message_id=newest,
            )
        result = types.SimpleNamespace(text=self.answer, output=None)
        return TurnReport(result=result, chat_id=chat, last_seen_message_id=newest)


def run(world: World, agent: Agent, step_plan: StepPlan) -> DurableStepResult:
    result: DurableStepResult = world.run_program(step_program(step_plan), turn=agent)
    return result


def ops(world: World) -> list[str]:
    return [op.method for op in world.store_ops]


def test_a_first_step_creates_the_chat_and_checkpoints_it() -> None:
    world = World()
    agent = Agent(world)
    result = run(world, agent, plan("plan"))
    (turn,) = agent.turns
    marker = step_marker(WF, "plan")
    assert turn.chat_id is None and turn.prompt == f"{marker} do the thing"
    assert turn.binding.attempt == 1 and turn.binding.workflow_id == WF
    assert not result.recovered and result.text == "the answer"
    cp = world.store.get_checkpoint(T, WF)
    assert cp is not None and cp.chat_id == result.chat_id
    assert cp.outcome == OUTCOME_FINISHED and cp.step == marker and cp.steps == (marker,)
    assert cp.last_seen_message_id == result.last_seen_message_id is not None
    # No chat id existed to journal the send under.
    assert "put_journal" not in ops(world)


def test_a_next_step_on_a_settled_chat_skips_recovery_and_journals_the_send_first() -> None:
    world = World()
    agent = Agent(world)
    first = run(world, agent, plan("plan"))
    world.sent.clear()
    world.store_ops.clear()
    second = run(world, agent, plan("apply", "apply it"))
    assert "get_chat" not in world.ops()
    assert ops(world)[:3] == ["get_checkpoint", "get_journal", "put_journal"]
    turn = agent.turns[-1]
    assert turn.chat_id == first.chat_id and turn.last_seen_message_id == first.last_seen_message_id
    assert second.chat_id == first.chat_id
    cp = world.store.get_checkpoint(T, WF)
    assert cp is not None and cp.steps == (step_marker(WF, "plan"), step_marker(WF, "apply"))


def test_retrying_a_finished_step_recovers_its_result_without_resubmitting() -> None:
    world = World()
    agent = Agent(world)
    first = run(world, agent, plan("plan"))
    again = run(world, agent, plan("plan"))
    assert again.recovered and again.text == "the answer" and again.result is None
    assert len(agent.turns) == 1
    assert world.user_texts(first.chat_id or "") == [f"{step_marker(WF, 'plan')} do the thing"]


def test_a_replayed_earlier_step_reads_history_and_leaves_the_chat_alone() -> None:
    world = World()
    run(world, Agent(world, "planned"), plan("plan", "plan it"))
    run(world, Agent(world, "applied"), plan("apply", "apply it"))
    world.sent.clear()
    world.store_ops.clear()
    replay = run(world, Agent(world), plan("plan", "plan it"))
    assert replay.recovered and replay.text == "planned"
    assert set(world.ops()) == {"get_messages"}
    assert [m for m in ops(world) if m.startswith(("put", "delete", "add"))] == []


def test_a_replayed_step_missing_from_history_is_a_recovery_error() -> None:
    world = World()
    run(world, Agent(world), plan("plan"))
    cp = world.store.get_checkpoint(T, WF)
    assert cp is not None
    world.store.put_checkpoint(
        T,
        WF,
        Checkpoint(
            chat_id=cp.chat_id, step="[wf-7/x]", steps=(step_marker(WF, "ghost"), "[wf-7/x]")
        ),
    )
    with pytest.raises(RecoveryError, match="no longer in the chat's history"):
        run(world, Agent(world), plan("ghost"))


def test_after_a_crash_mid_step_recovery_runs_and_the_resend_counts_attempts() -> None:
    """The checkpoint is from step one; the journal shows step two's send (a crash after the
    write-ahead, before the send): recovery, then a resend journaled with attempt 0."""
    world = World()
    agent = Agent(world)
    first = run(world, agent, plan("plan"))
    chat = first.chat_id or ""
    marker = step_marker(WF, "apply")
    world.store.put_journal(
        T, chat, JournalEntry(state=SUBMITTING, marker=marker, attempt=0, at=world.wall)
    )
    world.sent.clear()
    result = run(world, agent, plan("apply"))
    assert "get_chat" in world.ops()  # the settle-wait ran
    assert not result.recovered
    assert agent.turns[-1].binding.attempt == 1


def test_a_cut_short_attempt_is_resubmitted_with_the_grown_attempt_count() -> None:
    world = World()
    agent = Agent(world)
    first = run(world, agent, plan("plan"))
    chat = first.chat_id or ""
    marker = step_marker(WF, "apply")
    # A crashed attempt of "apply" that landed and was cut short by an interrupt.
    world.send(chat, f"{marker} apply", script=Script((Say("partial"),)))
    world.settle_server(chat)
    world.store.put_journal(
        T, chat, JournalEntry(state="cut-short", marker=marker, attempt=1, at=world.wall)
    )
    world.store.put_checkpoint(
        T,
        WF,
        Checkpoint(
            chat_id=chat, step=marker, outcome=OUTCOME_ABORTED, steps=(step_marker(WF, "plan"),)
        ),
    )
    run(world, agent, plan("apply"))
    journal_writes = [op.args[-1] for op in world.store_ops if op.method == "put_journal"]
    assert journal_writes[-1].attempt == 1 and journal_writes[-1].state == SUBMITTING
    assert agent.turns[-1].binding.attempt == 2
    assert world.user_texts(chat).count(f"{marker} do the thing") == 1


def test_the_finally_checkpoint_records_how_the_turn_ended_and_raises() -> None:
    world = World()
    agent = Agent(world)
    agent.error = CoderChatError("model failed", kind="generic")
    agent.script = Script((Fail(message="model failed"),))
    with pytest.raises(CoderChatError, match="model failed"):
        run(world, agent, plan("plan"))
    cp = world.store.get_checkpoint(T, WF)
    assert cp is not None and cp.outcome == OUTCOME_FAILED and cp.steps == ()
    # The errored attempt is resubmitted; this time a timeout fires an interrupt, so the
    # next attempt of the step pins cut_short.
    agent.script = None
    agent.error = CoderChatError("too slow", kind="timeout", retryable=True)
    with pytest.raises(CoderChatError):
        run(world, agent, plan("plan"))
    cp = world.store.get_checkpoint(T, WF)
    assert cp is not None and cp.outcome == OUTCOME_ABORTED
    agent.error = None
    result = run(world, agent, plan("plan"))
    assert not result.recovered  # pinned cut_short: resubmitted although history looks done


def test_turn_outcomes() -> None:
    assert turn_outcome(TurnReport(result=1)) == OUTCOME_FINISHED
    assert turn_outcome(TurnReport(error=TimeoutError())) == OUTCOME_ABORTED
    assert turn_outcome(TurnReport(error=CoderAgentError("x"), cancelled=True)) == OUTCOME_ABORTED
    assert turn_outcome(TurnReport(error=CoderChatError("x", kind="timeout"))) == OUTCOME_ABORTED
    api = CoderApiError(status=500, method="POST", path="/x")
    assert turn_outcome(TurnReport(error=api)) == OUTCOME_FAILED


def test_a_discarded_fresh_chat_is_recorded_stranded_and_its_claim_cleared() -> None:
    """C.5: the session was discarded, nothing to checkpoint; the stranded chat is recorded
    for the cleanup, and a crash-safe tool's claim on it must not be resumed."""
    world = World()
    agent = Agent(world)
    agent.discard = True
    agent.error = CoderAgentError("stream lost")

    claimed: dict[str, str] = {}

    def turn(effect: RunAgentTurn) -> TurnReport:
        report = agent(effect)
        chat = report.stranded_chat_ids[0]
        claimed["chat"] = chat
        world.store.put_checkpoint(T, WF, Checkpoint(chat_id=chat, outcome=OUTCOME_IN_FLIGHT))
        return report

    with pytest.raises(CoderAgentError, match="stream lost"):
        world.run_program(step_program(plan("plan")), turn=turn)
    assert [s.chat_id for s in world.store.stranded_chats(T)] == [claimed["chat"]]
    assert world.store.get_checkpoint(T, WF) is None
    # A checkpoint naming another chat is kept.
    world.store.put_checkpoint(T, WF, Checkpoint(chat_id="other", outcome=OUTCOME_FAILED))
    agent2 = Agent(world)
    agent2.discard = True
    agent2.error = CoderAgentError("lost again")

    def turn2(effect: RunAgentTurn) -> TurnReport:
        # The agent ran on the checkpointed chat's id but the test reports a fresh discard.
        return TurnReport(error=agent2.error, stranded_chat_ids=("gone",))

    with pytest.raises(CoderAgentError):
        world.run_program(step_program(plan("plan2")), turn=turn2, tools=None)
    cp = world.store.get_checkpoint(T, WF)
    assert cp is not None and cp.chat_id == "other"


def test_needs_recovery_and_latest_step_tables() -> None:
    a, b = "[wf/a]", "[wf/b]"
    finished = Checkpoint(chat_id="c", step=a, steps=(a,))
    assert not needs_recovery(finished, None, b)
    assert needs_recovery(finished, None, a)  # a retry of the finished step
    sent_b = JournalEntry(state=SUBMITTING, marker=b, attempt=0, at=0.0)
    assert needs_recovery(finished, sent_b, b)
    assert not needs_recovery(finished, JournalEntry(state="resumed", marker=a, attempt=1, at=0), b)
    for outcome in (OUTCOME_FAILED, OUTCOME_ABORTED, OUTCOME_IN_FLIGHT):
        assert needs_recovery(Checkpoint(chat_id="c", step=a, outcome=outcome), None, b)
    assert needs_recovery(Checkpoint(chat_id="c"), None, b)
    assert latest_step(finished, sent_b) == b
    assert latest_step(finished, None) == a
    assert latest_step(finished, JournalEntry(state="resumed", marker=a, attempt=1, at=0)) == a


def test_step_plans_validate() -> None:
    with pytest.raises(CoderAgentError, match="workflow_id"):
        StepPlan(workflow_id="", prompt="x")
    with pytest.raises(CoderAgentError, match="prompt"):
        StepPlan(workflow_id="wf", prompt="")
    default = StepPlan(workflow_id="wf", prompt="hello", client_tools={"a"})  # type: ignore[arg-type]
    assert default.client_tools == frozenset({"a"})
    assert default.marker.startswith("[wf/step-")


def test_a_turn_failing_before_any_chat_existed_writes_nothing() -> None:
    world = World()

    def turn(effect: RunAgentTurn) -> TurnReport:
        return TurnReport(error=CoderApiError(status=401, method="POST", path="/api/v2/chats"))

    with pytest.raises(CoderApiError):
        world.run_program(step_program(plan("plan")), turn=turn)
    assert world.store.get_checkpoint(T, WF) is None


def test_a_discard_without_a_claim_leaves_no_checkpoint_to_clear() -> None:
    world = World()

    def turn(effect: RunAgentTurn) -> TurnReport:
        return TurnReport(error=CoderAgentError("lost"), stranded_chat_ids=("s1",))

    with pytest.raises(CoderAgentError):
        world.run_program(step_program(plan("plan")), turn=turn)
    assert world.store.get_checkpoint(T, WF) is None
    assert [s.chat_id for s in world.store.stranded_chats(T)] == ["s1"]


def test_a_replayed_structured_step_without_an_answer_is_a_recovery_error() -> None:
    from tests.proto.durable.test_durable_recovery import _Answer

    world = World()
    run(world, Agent(world, "planned"), plan("plan", "plan it"))
    run(world, Agent(world, "applied"), plan("apply", "apply it"))
    with pytest.raises(RecoveryError, match="structured"):
        run(world, Agent(world), plan("plan", "plan it", structured=_Answer()))


def test_store_failures_are_durable_store_errors() -> None:
    from coder_proto.durable import DurableStoreError

    world = World()
    world.fail_store = lambda op: OSError("locked") if op.method == "get_checkpoint" else None  # type: ignore[assignment]
    with pytest.raises(DurableStoreError, match="get_checkpoint"):
        run(world, Agent(world), plan("plan"))

    class Wrong:
        def get_checkpoint(self, *args: Any) -> str:
            return "nope"

    other = World(store=Wrong())
    with pytest.raises(DurableStoreError, match="returned str"):
        run(other, Agent(other), plan("plan"))
