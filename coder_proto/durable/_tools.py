"""Crash-safe client tools: the tool-invocation ledger around an external effect
(docs/durable-workflows.md: "Make client tools crash-safe").

``crash_safe`` declares a client tool whose effect must happen exactly once, however often the
process dies. Its function receives a ``DurableToolContext`` (annotate a parameter with it;
that parameter stays out of the input schema) whose ``idempotency_key`` it hands to the
external system::

    @crash_safe
    async def charge_card(amount_cents: int, ctx: DurableToolContext) -> str:
        receipt = await payments.charge(amount_cents, idempotency_key=ctx.idempotency_key)
        return f"charged: receipt {receipt}"

Before it can run, the tool is bound to a durable store and a tenant (``run_turn`` binds the
tools it is given; ``bind_tools`` of an adapter binds them for an agent used directly). A run
of a bound tool is ``CrashSafeTool.program``, a generator of effects an adapter performs
(``StoreOp`` on the store, ``Invoke`` to call the function):

1. a ``done`` ledger entry means the effect committed already: its recorded output is returned
   and nothing runs;
2. when the tool runs inside a durable step, a chat no checkpoint names yet is claimed for the
   workflow first (an eager checkpoint, ``in_flight``), so a crash inside the first turn's
   tool leaves a chat the next attempt recovers instead of an orphan whose effect a fresh chat
   would repeat;
3. ``committing`` is written before the effect (no entry proves it never started);
4. the function runs with the idempotency key built from tenant, chat id and tool call id
   (the same key on every re-drive, so a committed effect replays as a no-op);
5. ``done`` is written with the output (``encode_output`` of the value, exactly what the tool
   loop submits);
6. in a step's live turn, the journal records the attempt as ``resumed``: its pause is being
   answered, so a run found live after a crash is doing the step's work and is left to
   finish (interrupting it and resubmitting would mint new call ids, sidestepping the keys).

A function that raises leaves ``committing`` behind: the outcome is ambiguous, and recovery
re-drives it with the same key rather than trusting an error.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Callable, Generator, Mapping
from typing import Any, Final, Protocol, get_type_hints, overload

import attrs

from .._agent.tools import Tool, ToolContext, encode_output
from .._errors import CoderAgentError
from ._effects import Invoke, WallClock
from ._errors import DurableStoreError
from ._records import (
    DEFAULT_TENANT,
    DONE,
    OUTCOME_IN_FLIGHT,
    RESUMED,
    Checkpoint,
    JournalEntry,
    LedgerEntry,
    check_key_part,
    idempotency_key,
)
from ._store import StoreOp, store_call

__all__ = [
    "CrashSafeTool",
    "DurableBinding",
    "DurableToolContext",
    "Invoke",
    "LeaseCheck",
    "crash_safe",
    "run_program",
]

logger = logging.getLogger("coder_proto")

#: The parameter that receives the ``ToolContext`` when the function declares none.
_SYNTHETIC_CONTEXT: Final = "_durable_tool_context"


class LeaseCheck(Protocol):
    """How an adapter checks a step's workflow lease for a crash-safe tool (D37): ``check``
    blocks (a plain tool function), ``acheck`` is awaited (a coroutine tool function on an
    event loop); both run ``WorkflowLease.verify`` and raise what it raises."""

    @property
    def fencing_token(self) -> int | None: ...

    def check(self) -> None: ...

    async def acheck(self) -> None: ...


@attrs.frozen(kw_only=True)
class DurableToolContext:
    """What a crash-safe tool's function may know about its call. ``idempotency_key`` is the
    same in every process that ever runs this call: pass it to the external system.

    Inside a durable step (``run_turn``), the step holds the workflow's lease (D27), and
    ``fencing_token`` is the number its acquisition took from the workflow's counter (D37):
    a later holder of the lease always has a larger one. Call ``check_lease()`` (blocking,
    in a plain function) or ``await acheck_lease()`` (in a coroutine function) right before
    the effect: it raises ``WorkflowLeaseLostError`` when another worker took the lease over
    or when, by this worker's clock, the lease expired since its last confirmed renewal. A
    process frozen between the check and the effect still gets through; an effect that
    lands in a store you control should be written conditionally on ``fencing_token``
    (refused when it is lower than the largest one that store has seen for the workflow).

    Outside a step (a tool bound with ``bind_tools`` for an agent used directly) there is
    no lease: ``fencing_token`` is ``None`` and the checks return at once. With a store that
    keeps no counter, ``fencing_token`` is ``None`` and the checks still compare owners and
    the clock."""

    chat_id: str
    tool_call_id: str
    tool_name: str
    tenant: str
    workflow_id: str | None
    idempotency_key: str
    #: The number of the step's lease acquisition (D37); ``None`` without a lease.
    fencing_token: int | None = None
    _lease_check: LeaseCheck | None = attrs.field(
        default=None, alias="lease_check", eq=False, repr=False
    )

    def check_lease(self) -> None:
        """Right before the effect, in a plain function: raise ``WorkflowLeaseLostError``
        unless the step still holds the workflow's lease, by the store and by this worker's
        clock (D37). It reads the store (``DurableStoreError`` when that fails) and blocks
        meanwhile; in a coroutine function, ``await acheck_lease()`` instead."""
        if self._lease_check is not None:
            self._lease_check.check()

    async def acheck_lease(self) -> None:
        """``check_lease`` for a coroutine function on an event loop (asyncio, trio): the
        store is read without blocking the loop."""
        if self._lease_check is not None:
            await self._lease_check.acheck()


@attrs.frozen(kw_only=True)
class DurableBinding:
    """Where a crash-safe tool records its ledger: the ``tenant`` (part of every key), and when
    it runs inside a durable step, the ``workflow_id`` and the step's ``marker`` (for the
    eager claim of a chat no checkpoint names yet) and, in the step's live turn, the
    ``attempt`` it belongs to (the step's committed attempts once its send landed), for the
    ``resumed`` journal entry written after the effect."""

    tenant: str = DEFAULT_TENANT
    workflow_id: str | None = None
    marker: str | None = None
    attempt: int | None = None

    def __attrs_post_init__(self) -> None:
        check_key_part(self.tenant, "tenant")
        if self.workflow_id is not None:
            check_key_part(self.workflow_id, "workflow_id")
        if self.attempt is not None and (type(self.attempt) is not int or self.attempt < 1):
            raise CoderAgentError(f"attempt must be a positive integer, got {self.attempt!r}")


def _unbound(name: str) -> Callable[..., Any]:
    def unbound(*args: Any, **kwargs: Any) -> Any:
        raise CoderAgentError(
            f"crash-safe tool {name!r} is not bound to a durable store: pass it to run_turn, "
            "or bind it with bind_tools before giving it to an agent"
        )

    return unbound


@attrs.frozen(kw_only=True)
class CrashSafeTool(Tool):
    """A ``Tool`` whose runs go through the ledger (see the module docstring). ``func`` is a
    guard until an adapter binds the tool; ``inner`` is the user's function (calling the tool
    object directly calls it, for tests)."""

    inner: Callable[..., Any] = attrs.field(eq=False, repr=False)
    #: The function's own context parameter, if it declares one.
    inner_context: str | None = None
    #: True when that parameter wants a ``DurableToolContext`` (else a plain ``ToolContext``).
    wants_durable: bool = False

    @property
    def inner_is_async(self) -> bool:
        return inspect.iscoroutinefunction(self.inner)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.inner(*args, **kwargs)

    def program(
        self,
        binding: DurableBinding,
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any],
        lease_check: LeaseCheck | None = None,
    ) -> Generator[StoreOp | Invoke | WallClock, Any, Any]:
        """One run of the tool, as effects (see the module docstring). ``kwargs`` holds the
        ``ToolContext`` under ``context_param`` (the agents always pass it); ``lease_check``
        is the adapter's check of the step's lease (D37), given to the function's
        ``DurableToolContext`` with its fencing token."""
        call_kwargs = dict(kwargs)
        context = call_kwargs.pop(self.context_param or _SYNTHETIC_CONTEXT, None)
        if not isinstance(context, ToolContext) or not context.chat_id:
            raise CoderAgentError(
                f"crash-safe tool {self.name!r} needs the running call's chat id: run it "
                "through an agent, which passes its ToolContext"
            )
        tenant = binding.tenant
        chat_id, call_id = context.chat_id, context.tool_call_id
        durable = DurableToolContext(
            chat_id=chat_id,
            tool_call_id=call_id,
            tool_name=context.tool_name,
            tenant=tenant,
            workflow_id=binding.workflow_id,
            idempotency_key=idempotency_key(tenant, chat_id, call_id),
            fencing_token=lease_check.fencing_token if lease_check is not None else None,
            lease_check=lease_check,
        )
        if self.inner_context is not None:
            call_kwargs[self.inner_context] = durable if self.wants_durable else context
        entry: LedgerEntry | None = yield from store_call("get_ledger", tenant, chat_id, call_id)
        if entry is not None and entry.state == DONE:
            logger.info("tool call %s already committed; returning its recorded output", call_id)
            return entry.output
        if binding.workflow_id is not None:
            checkpoint: Checkpoint | None = yield from store_call(
                "get_checkpoint", tenant, binding.workflow_id
            )
            if checkpoint is None:
                claim = Checkpoint(chat_id=chat_id, step=binding.marker, outcome=OUTCOME_IN_FLIGHT)
                yield from store_call("put_checkpoint", tenant, binding.workflow_id, claim)
        if entry is None:
            # Write-ahead: if this fails, the effect must not happen (the tool fails instead).
            yield from store_call("put_ledger", tenant, chat_id, call_id, LedgerEntry.committing())
        value = yield Invoke(args=tuple(args), kwargs=call_kwargs)
        output = encode_output(value)
        try:
            yield from store_call("put_ledger", tenant, chat_id, call_id, LedgerEntry.done(output))
            if binding.marker is not None and binding.attempt is not None:
                # The live loop answers this attempt's pause with recorded results: a run
                # found live after a crash from here on is doing the step's work, so recovery
                # lets it finish instead of cutting it down (the guide's journaled "resumed").
                wall = yield WallClock()
                resumed = JournalEntry(
                    state=RESUMED, marker=binding.marker, attempt=binding.attempt, at=float(wall)
                )
                yield from store_call("put_journal", tenant, chat_id, resumed)
        except DurableStoreError as exc:
            # The effect committed: the model must see its result, never an error that invites
            # a second call under a new key. The entry stays "committing", which a recovery
            # resolves by re-driving with the same key.
            logger.warning("recording tool call %s after its effect failed: %s", call_id, exc)
        return value


def _context_param(func: Callable[..., Any], hints: Mapping[str, Any]) -> tuple[str | None, bool]:
    for param in inspect.signature(func).parameters.values():
        hint = hints.get(param.name)
        if hint is DurableToolContext or hint is ToolContext:
            return param.name, hint is DurableToolContext
    return None, False


def _shim(func: Callable[..., Any], hints: Mapping[str, Any], context: str | None) -> Any:
    """A stand-in with ``func``'s signature whose context parameter is a plain ``ToolContext``,
    so ``Tool.from_function`` derives the schema without it."""

    def shim(*args: Any, **kwargs: Any) -> Any:  # pragma: no cover - only inspected
        return None

    resolved = {name: (ToolContext if name == context else hint) for name, hint in hints.items()}
    signature = inspect.signature(func)
    shim.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[
            p.replace(annotation=resolved.get(p.name, p.annotation))
            for p in signature.parameters.values()
        ],
        return_annotation=resolved.get("return", signature.return_annotation),
    )
    shim.__annotations__ = resolved
    shim.__name__ = getattr(func, "__name__", "tool")
    shim.__doc__ = func.__doc__
    return shim


def _first_paragraph(func: Callable[..., Any]) -> str | None:
    doc = inspect.getdoc(func)
    if not doc:
        return None
    return doc.strip().split("\n\n", 1)[0].replace("\n", " ").strip() or None


def _build(
    func: Callable[..., Any],
    *,
    name: str | None,
    description: str | None,
    schema: Mapping[str, Any] | None,
) -> CrashSafeTool:
    if not callable(func):
        raise CoderAgentError(f"crash_safe needs a function, got {func!r}")
    try:
        hints = get_type_hints(func, include_extras=True)
    except Exception as exc:
        raise CoderAgentError(f"cannot read the type hints of {func!r}: {exc}") from exc
    context, wants_durable = _context_param(func, hints)
    if schema is not None:
        base = Tool.from_schema(
            str(name or getattr(func, "__name__", "tool")),
            schema,
            func,
            description=description if description is not None else _first_paragraph(func),
        )
    else:
        base = Tool.from_function(_shim(func, hints, context), name=name, description=description)
    fields = {f.name: getattr(base, f.name) for f in attrs.fields(Tool) if f.init}
    fields.update(
        func=_unbound(base.name),
        context_param=context or _SYNTHETIC_CONTEXT,
        inner=func,
        inner_context=context,
        wants_durable=wants_durable,
    )
    return CrashSafeTool(**fields)


@overload
def crash_safe(func: Callable[..., Any], /) -> CrashSafeTool: ...


@overload
def crash_safe(
    *,
    name: str | None = None,
    description: str | None = None,
    schema: Mapping[str, Any] | None = None,
) -> Callable[[Callable[..., Any]], CrashSafeTool]: ...


def crash_safe(
    func: Callable[..., Any] | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    schema: Mapping[str, Any] | None = None,
) -> CrashSafeTool | Callable[[Callable[..., Any]], CrashSafeTool]:
    """Declare a crash-safe client tool: ``@crash_safe`` or ``@crash_safe(name=...,
    description=..., schema=...)``, like ``coder_proto.tool``. A parameter annotated
    ``DurableToolContext`` (or ``ToolContext``) receives the call's context and is left out of
    the schema. The result must be bound before an agent can run it."""

    def wrap(f: Callable[..., Any]) -> CrashSafeTool:
        return _build(f, name=name, description=description, schema=schema)

    if func is not None:
        return wrap(func)
    return wrap


def run_program(program: Generator[Any, Any, Any], perform: Callable[[Any], Any]) -> Any:
    """Run an effect program synchronously: ``perform(effect)`` returns each effect's value
    (an exception it raises is thrown back into the program). For blocking adapters and
    tests; async adapters await each effect instead."""
    value: Any = None
    error: BaseException | None = None
    while True:
        try:
            effect = program.throw(error) if error is not None else program.send(value)
        except StopIteration as stop:
            return stop.value
        value, error = None, None
        try:
            value = perform(effect)
        except Exception as exc:
            error = exc
