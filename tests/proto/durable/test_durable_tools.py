"""Crash-safe client tools: the ledger around an external effect (docs/durable-workflows.md:
"Make client tools crash-safe"). The tool's run is a program of effects; these tests perform
them on a ``MemoryStore`` and record what happened in which order."""

from __future__ import annotations

from typing import Any

import attrs
import pytest

from coder_proto import CoderAgentError, ToolCall, ToolContext
from coder_proto._agent.tool_calls import plan_tool_calls
from coder_proto.durable import (
    OUTCOME_IN_FLIGHT,
    RESUMED,
    Checkpoint,
    CrashSafeTool,
    DurableToolContext,
    LedgerEntry,
    MemoryStore,
    crash_safe,
)
from coder_proto.durable._effects import Invoke, WallClock
from coder_proto.durable._store import StoreOp
from coder_proto.durable._tools import DurableBinding, run_program

TENANT = "acme"


@crash_safe
def charge_card(amount_cents: int, ctx: DurableToolContext) -> str:
    """Charge the customer's card.

    Longer notes that stay out of the description."""
    return f"charged {amount_cents} with {ctx.idempotency_key}"


@attrs.frozen
class Order:
    sku: str


def context(call_id: str = "call-1", chat_id: str | None = "chat-1") -> ToolContext:
    return ToolContext(chat_id=chat_id, tool_call_id=call_id, tool_name="charge_card")


class Recorder:
    def __init__(self, store: MemoryStore, tool: CrashSafeTool) -> None:
        self.store = store
        self.tool = tool
        self.trace: list[str] = []
        self.fail_invoke: BaseException | None = None

    def __call__(self, effect: Any) -> Any:
        if isinstance(effect, StoreOp):
            detail = getattr(effect.args[-1], "state", "") if effect.args else ""
            self.trace.append(f"{effect.method}{':' + detail if detail else ''}")
            return effect.apply(self.store)
        if isinstance(effect, WallClock):
            return 1234.5
        assert isinstance(effect, Invoke)
        self.trace.append("effect")
        if self.fail_invoke is not None:
            raise self.fail_invoke
        return self.tool.inner(*effect.args, **effect.kwargs)

    def run(self, binding: DurableBinding, kwargs: dict[str, Any]) -> Any:
        return run_program(self.tool.program(binding, (), kwargs), self)


def test_the_schema_leaves_the_context_out_and_keeps_the_description() -> None:
    assert isinstance(charge_card, CrashSafeTool)
    assert charge_card.name == "charge_card"
    assert charge_card.description == "Charge the customer's card."
    assert charge_card.input_schema == {
        "type": "object",
        "properties": {"amount_cents": {"type": "integer"}},
        "additionalProperties": False,
        "required": ["amount_cents"],
    }
    assert charge_card.context_param == "ctx" and charge_card.wants_durable


def test_write_ahead_then_effect_then_done_with_the_idempotency_key() -> None:
    """committing before the effect (no entry proves it never started), done after it with
    the output the tool loop submits; the key folds in tenant, chat and call."""
    store = MemoryStore()
    rec = Recorder(store, charge_card)
    value = rec.run(DurableBinding(tenant=TENANT), {"amount_cents": 500, "ctx": context()})
    assert value == "charged 500 with acme/chat-1/call-1"
    assert rec.trace == ["get_ledger", "put_ledger:committing", "effect", "put_ledger:done"]
    assert store.get_ledger(TENANT, "chat-1", "call-1") == LedgerEntry.done(value)


def test_a_done_entry_returns_the_recorded_output_without_running() -> None:
    store = MemoryStore()
    store.put_ledger(TENANT, "chat-1", "call-1", LedgerEntry.done("recorded"))
    rec = Recorder(store, charge_card)
    assert (
        rec.run(DurableBinding(tenant=TENANT), {"amount_cents": 5, "ctx": context()}) == "recorded"
    )
    assert "effect" not in rec.trace


def test_a_committing_entry_is_redriven_with_the_same_key() -> None:
    store = MemoryStore()
    store.put_ledger(TENANT, "chat-1", "call-1", LedgerEntry.committing())
    rec = Recorder(store, charge_card)
    value = rec.run(DurableBinding(tenant=TENANT), {"amount_cents": 5, "ctx": context()})
    assert rec.trace == ["get_ledger", "effect", "put_ledger:done"]
    assert value.endswith("acme/chat-1/call-1")


def test_a_raising_tool_leaves_committing_for_recovery_to_redrive() -> None:
    store = MemoryStore()
    rec = Recorder(store, charge_card)
    rec.fail_invoke = RuntimeError("payment API timed out")
    with pytest.raises(RuntimeError, match="timed out"):
        rec.run(DurableBinding(tenant=TENANT), {"amount_cents": 5, "ctx": context()})
    assert store.get_ledger(TENANT, "chat-1", "call-1") == LedgerEntry.committing()


def test_inside_a_step_the_chat_is_claimed_before_the_effect_and_the_attempt_journaled() -> None:
    """A chat no checkpoint names is claimed for the workflow (eager checkpoint) before any
    effect; after the effect the live attempt is journaled ``resumed``."""
    store = MemoryStore()
    rec = Recorder(store, charge_card)
    binding = DurableBinding(tenant=TENANT, workflow_id="wf", marker="[wf/pay]", attempt=1)
    rec.run(binding, {"amount_cents": 5, "ctx": context()})
    assert rec.trace == [
        "get_ledger",
        "get_checkpoint",
        "put_checkpoint",
        "put_ledger:committing",
        "effect",
        "put_ledger:done",
        "put_journal:resumed",
    ]
    assert store.get_checkpoint(TENANT, "wf") == Checkpoint(
        chat_id="chat-1", step="[wf/pay]", outcome=OUTCOME_IN_FLIGHT
    )
    journal = store.get_journal(TENANT, "chat-1")
    assert journal is not None and (journal.state, journal.attempt, journal.at) == (
        RESUMED,
        1,
        1234.5,
    )
    # An existing checkpoint is never overwritten by a claim.
    again = Recorder(store, charge_card)
    again.run(binding, {"amount_cents": 5, "ctx": context("call-2")})
    assert "put_checkpoint" not in again.trace


def test_plain_tool_context_and_no_context_parameter() -> None:
    @crash_safe(name="ship", description="Ship it.")
    async def ship(order: str, ctx: ToolContext) -> str:
        return f"{order}:{ctx.tool_call_id}"

    @crash_safe
    def ping() -> str:
        return "pong"

    assert ship.name == "ship" and not ship.wants_durable and ship.inner_is_async
    assert ping.inner_context is None and ping.context_param == "_durable_tool_context"
    rec = Recorder(MemoryStore(), ping)
    assert rec.run(DurableBinding(), {"_durable_tool_context": context()}) == "pong"
    rec_ship = Recorder(MemoryStore(), ship)
    program = ship.program(DurableBinding(), (), {"order": "o1", "ctx": context()})
    effects: list[Any] = []

    def perform(effect: Any) -> Any:
        effects.append(effect)
        if isinstance(effect, Invoke):
            assert effect.kwargs["ctx"] == context()
            return "shipped"
        return rec_ship(effect)

    assert run_program(program, perform) == "shipped"


def test_explicit_schema_and_model_input() -> None:
    @crash_safe(schema={"type": "object", "properties": {"n": {"type": "integer"}}})
    def count(n: int, ctx: DurableToolContext) -> int:
        """Count."""
        return n

    @crash_safe
    def reserve(order: Order, ctx: DurableToolContext) -> str:
        return order.sku

    assert count.description == "Count." and count.input_mode == "kwargs"
    assert reserve.input_mode == "model"
    assert reserve.input_schema["properties"] == {"sku": {"type": "string"}}
    # The agent's dispatch plan passes the context to the bound function.
    plan = plan_tool_calls(
        [ToolCall(tool_call_id="x", tool_name="reserve", input='{"sku": "A"}')],
        {"reserve": reserve},
        chat_id="chat-1",
    )
    (invocation,) = plan.invocations
    assert isinstance(invocation.args[0], Order)
    assert isinstance(invocation.kwargs["ctx"], ToolContext)


def test_unbound_tools_and_missing_context_are_typed_errors() -> None:
    with pytest.raises(CoderAgentError, match="not bound"):
        charge_card.func(amount_cents=1, ctx=context())  # type: ignore[misc]
    assert (
        charge_card(
            1,
            ctx=DurableToolContext(
                chat_id="c",
                tool_call_id="x",
                tool_name="t",
                tenant="t",
                workflow_id=None,
                idempotency_key="k",
            ),
        )
        == "charged 1 with k"
    )
    rec = Recorder(MemoryStore(), charge_card)
    with pytest.raises(CoderAgentError, match="chat id"):
        rec.run(DurableBinding(), {"amount_cents": 1, "ctx": context(chat_id=None)})
    with pytest.raises(CoderAgentError, match="chat id"):
        rec.run(DurableBinding(), {"amount_cents": 1})
    with pytest.raises(CoderAgentError, match="needs a function"):
        crash_safe(3)  # type: ignore[call-overload]
    with pytest.raises(CoderAgentError, match="attempt"):
        DurableBinding(attempt=0)
    with pytest.raises(CoderAgentError, match="workflow_id"):
        DurableBinding(workflow_id="")


def test_unresolvable_hints_are_a_typed_error() -> None:
    def broken(x: Missing) -> None:  # type: ignore[name-defined]  # noqa: F821
        pass

    with pytest.raises(CoderAgentError, match="type hints"):
        crash_safe(broken)


def test_run_program_throws_errors_back_in() -> None:
    def program() -> Any:
        try:
            yield "boom"
        except ValueError as exc:
            return f"caught {exc}"

    def perform(effect: Any) -> Any:
        raise ValueError(effect)

    assert run_program(program(), perform) == "caught boom"


def test_a_tool_without_a_docstring_has_no_description() -> None:
    @crash_safe
    def bare(x: int) -> int:
        return x

    assert bare.description is None


def test_an_explicit_schema_without_a_docstring_has_no_description() -> None:
    @crash_safe(schema={"type": "object"})
    def bare(**kwargs: object) -> None:
        return None

    assert bare.description is None


def test_a_failed_write_ahead_prevents_the_effect() -> None:
    from coder_proto.durable import DurableStoreError

    rec = Recorder(MemoryStore(), charge_card)
    original = rec.__call__

    def perform(effect: Any) -> Any:
        if isinstance(effect, StoreOp) and effect.method == "put_ledger":
            raise OSError("disk full")
        return original(effect)

    program = charge_card.program(
        DurableBinding(tenant=TENANT), (), {"amount_cents": 1, "ctx": context()}
    )
    with pytest.raises(DurableStoreError, match="put_ledger") as info:
        run_program(program, perform)
    assert isinstance(info.value.__cause__, OSError)
    assert "effect" not in rec.trace


def test_a_failed_record_after_the_effect_still_returns_its_result() -> None:
    """The effect committed: the model must see its result (an error would invite a second
    call under a new key); the entry stays ``committing`` for a recovery to re-drive."""
    store = MemoryStore()
    rec = Recorder(store, charge_card)
    original = rec.__call__

    def perform(effect: Any) -> Any:
        if (
            isinstance(effect, StoreOp)
            and effect.method == "put_ledger"
            and effect.args[-1].state == "done"
        ):
            raise OSError("disk full")
        return original(effect)

    binding = DurableBinding(tenant=TENANT, workflow_id="wf", marker="[wf/p]", attempt=1)
    program = charge_card.program(binding, (), {"amount_cents": 1, "ctx": context()})
    assert run_program(program, perform).startswith("charged 1")
    assert store.get_ledger(TENANT, "chat-1", "call-1") == LedgerEntry.committing()
    assert store.get_journal(TENANT, "chat-1") is None


class Checks:
    """An adapter's lease check (``LeaseCheck``): counts the checks of each form."""

    fencing_token = 7

    def __init__(self) -> None:
        self.calls: list[str] = []

    def check(self) -> None:
        self.calls.append("check")

    async def acheck(self) -> None:
        self.calls.append("acheck")


def test_the_context_carries_the_steps_fencing_token_and_its_lease_check_d37() -> None:
    import asyncio

    seen: list[DurableToolContext] = []

    @crash_safe
    def fenced(ctx: DurableToolContext) -> str:
        """Write with the token."""
        ctx.check_lease()
        seen.append(ctx)
        return f"wrote with token {ctx.fencing_token}"

    checks = Checks()
    rec = Recorder(MemoryStore(), fenced)
    program = fenced.program(DurableBinding(tenant=TENANT), (), {"ctx": context()}, checks)
    assert run_program(program, rec) == "wrote with token 7"
    (ctx,) = seen
    asyncio.run(ctx.acheck_lease())
    assert checks.calls == ["check", "acheck"]
    assert "lease_check" not in repr(ctx) and "fencing_token=7" in repr(ctx)
    # Outside a step: no lease, no token, and the checks pass at once.
    assert rec.run(DurableBinding(tenant=TENANT), {"ctx": context("call-2")}) == (
        "wrote with token None"
    )
    asyncio.run(seen[-1].acheck_lease())
    assert seen[-1].fencing_token is None and checks.calls == ["check", "acheck"]
