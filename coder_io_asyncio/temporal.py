"""Durable agent workflows on Temporal (docs/scale-out.md; the ``temporal`` extra:
``pip install 'coder-agents[temporal]'``).

Nothing in the library imports this module (nor ``temporalio``) unless you do.

The two sides of a Temporal application:

* **Workers** register the activities of a ``DurableActivities``: ``coder.run_turn`` runs one
  durable step (``run_turn`` underneath, on the worker's store), ``coder.archive_workflow``
  retires the workflow's chats at its end, and ``coder.sweep_orphans`` is the orphan sweep,
  schedulable on its own (``OrphanSweepWorkflow``). While a turn runs, the activity heartbeats
  with its progress; Temporal's cancellation of the activity interrupts the server's run
  (``run_turn``'s cancellation, D22) after the checkpoint is written; errors are mapped onto
  Temporal's retry rules (``application_error``).
* **Workflow code** uses ``DurableTurns``: ``await turns.turn(prompt, step=...)`` and, at the
  end, ``await turns.archive()``. It is deterministic (no clock, no randomness, no I/O): the
  durable workflow id is the Temporal workflow id, so a step retried by Temporal, on any
  worker, recovers the same chat.

In workflow files, import this module through the sandbox's pass-through (``with
workflow.unsafe.imports_passed_through(): ...``) and give the worker ``workflow_runner()``,
which passes the library's packages through the sandbox.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from datetime import UTC, datetime, timedelta
from typing import Any, TypeVar

from temporalio import activity, workflow
from temporalio.common import RetryPolicy
from temporalio.exceptions import ApplicationError
from temporalio.worker.workflow_sandbox import SandboxedWorkflowRunner, SandboxRestrictions

from coder_proto import CoderAgentError
from coder_proto.durable import (
    DEFAULT_TENANT,
    DurableStoreError,
    RecoveryError,
    WorkflowBusyError,
)

from .client import CoderChatClient
from .durable import archive_workflow, run_turn, sweep_orphans

__all__ = [
    "ACTIVITY_ARCHIVE",
    "ACTIVITY_RUN_TURN",
    "ACTIVITY_SWEEP",
    "DEFAULT_RETRY_POLICY",
    "ArchiveOutcome",
    "ArchiveRequest",
    "DurableActivities",
    "DurableTurns",
    "OrphanSweepWorkflow",
    "SweepOutcome",
    "SweepRequest",
    "TurnOutcome",
    "TurnRequest",
    "application_error",
    "workflow_runner",
]

ACTIVITY_RUN_TURN = "coder.run_turn"
"""The activity that runs one durable step (``DurableActivities`` registers it,
``DurableTurns.turn`` calls it)."""
ACTIVITY_ARCHIVE = "coder.archive_workflow"
"""The activity that archives a workflow's chats (``DurableTurns.archive`` calls it)."""
ACTIVITY_SWEEP = "coder.sweep_orphans"
"""The activity that retires orphaned chats (``OrphanSweepWorkflow`` calls it)."""

DEFAULT_RETRY_POLICY = RetryPolicy(
    initial_interval=timedelta(seconds=1),
    backoff_coefficient=2.0,
    maximum_interval=timedelta(seconds=60),
)
"""The retry policy of ``DurableTurns``: unlimited attempts with a capped backoff. A step is
safe to repeat (the durable layer recovers before it resubmits); errors that can never
succeed are raised non-retryable (``application_error``)."""

#: The packages ``workflow_runner`` passes through the workflow sandbox.
_PASSTHROUGH = (
    "coder_io_asyncio",
    "coder_io_common",
    "coder_proto",
    "attrs",
    "httpx",
    "httpcore",
    "h11",
    "wsproto",
    "jsonschema",
    "referencing",
    "rpds",
    "anyio",
    "sniffio",
    "certifi",
    "idna",
)


def workflow_runner() -> SandboxedWorkflowRunner:
    """Temporal's sandboxed workflow runner with the library's packages passed through (they
    are imported once per worker, not once per workflow run). Give it to the ``Worker`` that
    runs workflows using ``DurableTurns``."""
    restrictions = SandboxRestrictions.default.with_passthrough_modules(*_PASSTHROUGH)
    return SandboxedWorkflowRunner(restrictions=restrictions)


# -- what crosses Temporal's wire -------------------------------------------------------------


@dataclasses.dataclass
class TurnRequest:
    """The input of ``coder.run_turn``: one step of ``workflow_id`` (``step`` names it; see
    ``run_turn``). ``tenant`` is the store's tenant (``None``: the activities' own)."""

    workflow_id: str
    prompt: str
    step: str | None = None
    tenant: str | None = None


@dataclasses.dataclass
class TurnOutcome:
    """The result of ``coder.run_turn``: ``run_turn``'s result as data. ``output`` is the
    structured answer (pydantic models and dataclasses as plain JSON data); ``attempt`` is
    the Temporal attempt that produced it."""

    text: str
    recovered: bool
    chat_id: str | None
    step: str
    output: Any = None
    attempt: int = 1


@dataclasses.dataclass
class ArchiveRequest:
    """The input of ``coder.archive_workflow``."""

    workflow_id: str
    tenant: str | None = None


@dataclasses.dataclass
class ArchiveOutcome:
    """The result of ``coder.archive_workflow`` (``ArchiveWorkflowResult`` as data).
    ``archived`` is ``False`` when there was nothing to archive: the workflow never created a
    chat, or an earlier attempt of the archive finished the job (archived and forgotten) but
    its worker died before Temporal recorded the result."""

    archived: bool
    chat_id: str | None = None
    archived_chat_ids: list[str] = dataclasses.field(default_factory=list)


@dataclasses.dataclass
class SweepRequest:
    """The input of ``coder.sweep_orphans``: ``min_age`` (seconds) spares chats younger than
    that, which may belong to a first turn still running; ``heartbeat_timeout`` (seconds) is
    how soon ``OrphanSweepWorkflow`` retries a sweep whose worker stopped heartbeating."""

    min_age: float = 0.0
    heartbeat_timeout: float = 60.0


@dataclasses.dataclass
class SweepOutcome:
    """The result of ``coder.sweep_orphans`` (``SweepResult`` as data)."""

    archived_chat_ids: list[str] = dataclasses.field(default_factory=list)
    failed_chat_ids: list[str] = dataclasses.field(default_factory=list)
    skipped_chat_ids: list[str] = dataclasses.field(default_factory=list)


def _plain(value: Any) -> Any:
    """A structured output as JSON data."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        return dump(mode="json")
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return value


# -- errors -----------------------------------------------------------------------------------


def application_error(exc: BaseException) -> ApplicationError | None:
    """Temporal's view of a step's error, or ``None`` for an error that Temporal should see
    as it is (its default: retried).

    * ``WorkflowBusyError`` and every library error with ``retryable=True`` (timeouts, passing
      stream and network failures, 408/425/429/5xx) are retryable;
    * ``DurableStoreError`` is retryable (a store outage passes; Temporal's policy bounds it);
    * ``RecoveryError``, every other library error (a 4xx, an archived chat, a failed run) and
      invalid input (``ValueError``, ``TypeError``) are non-retryable: the same call fails
      every time, or repeating it could duplicate an effect.

    The error's type is the error's class name, its details one dict (``chat_id``,
    ``retryable``, and ``kind`` / ``status`` when the error has them)."""
    if isinstance(exc, ApplicationError):
        return exc
    if isinstance(exc, WorkflowBusyError | DurableStoreError):
        retryable = True
    elif isinstance(exc, RecoveryError):
        retryable = False
    elif isinstance(exc, CoderAgentError):
        retryable = bool(exc.retryable)
    elif isinstance(exc, ValueError | TypeError):
        retryable = False
    else:
        return None
    details: dict[str, Any] = {"retryable": retryable}
    for name in ("chat_id", "kind", "status"):
        value = getattr(exc, name, None)
        if isinstance(value, str | int) and not isinstance(value, bool):
            details[name] = value
    error = ApplicationError(
        str(exc) or type(exc).__name__,
        details,
        type=type(exc).__name__,
        non_retryable=not retryable,
    )
    error.__cause__ = exc
    return error


# -- the worker side --------------------------------------------------------------------------


class _Progress:
    """What a running turn has done so far: the heartbeat's details."""

    def __init__(self, workflow_id: str | None, step: str | None, attempt: int) -> None:
        self.workflow_id = workflow_id
        self.step = step
        self.attempt = attempt
        self.phase = "starting"
        self.events = 0
        self.segments = 0
        self.settled = 0
        self.last_event: str | None = None
        self.started = time.monotonic()
        self.beat = self.started
        self.longest_gap = 0.0
        self.heartbeat_timeout = 0.0

    def beating(self) -> None:
        """A heartbeat tick: how long since the last one (a stalled or frozen worker's gap
        shows here)."""
        now = time.monotonic()
        self.longest_gap = max(self.longest_gap, now - self.beat)
        self.beat = now

    def stalled(self) -> bool:
        """True when the worker went longer than the heartbeat timeout between two ticks
        (or since the last one): Temporal may have timed the attempt out."""
        gap = max(self.longest_gap, time.monotonic() - self.beat)
        return self.heartbeat_timeout > 0 and gap > self.heartbeat_timeout

    def seen(self, event: Any) -> None:
        kind = getattr(event, "type", None)
        if not isinstance(kind, str):
            return
        self.phase = "turn"
        self.events += 1
        self.last_event = kind
        if kind == "segment:start":
            self.segments += 1
        elif kind == "segment:settle":
            self.settled += 1

    def details(self) -> dict[str, Any]:
        return {
            "workflow_id": self.workflow_id,
            "step": self.step,
            "attempt": self.attempt,
            "phase": self.phase,
            "segments": self.segments,
            "segments_settled": self.settled,
            "events": self.events,
            "last_event": self.last_event,
            "elapsed_s": round(time.monotonic() - self.started, 3),
        }


_T = TypeVar("_T")


def _stale_attempt(progress: _Progress) -> bool:
    """True when Temporal cancelled the running activity because the attempt is no longer
    its own, not because the workflow asked: it timed out, or the server no longer knows it
    after this worker stalled (or froze) past the heartbeat timeout, so Temporal has retried
    it. (The server also forgets the attempt of a workflow that was cancelled or closed; a
    worker that kept heartbeating treats that as the workflow's cancellation.)"""
    details = activity.cancellation_details()
    if details is None or details.cancel_requested or details.worker_shutdown:
        return False
    return details.timed_out or (details.not_found and progress.stalled())


def _check_attempt_current() -> None:
    """Refuse an attempt that Temporal handed out longer than its heartbeat timeout ago
    without a heartbeat: a worker that stalled or froze with a poll outstanding gets such a
    task when it goes on, after Temporal timed the attempt out and retried the step
    elsewhere, maybe after the whole workflow finished and was archived (a step run then
    would start a new chat). Its failure is dropped by Temporal, which has moved on. Relies
    on the workers' clocks agreeing with the Temporal server's, as the lease does."""
    info = activity.info()
    timeout, started = info.heartbeat_timeout, info.started_time
    if not timeout or started is None:
        return
    if started.tzinfo is None:
        started = started.replace(tzinfo=UTC)
    late = datetime.now(UTC) - started
    if late > timeout:
        raise ApplicationError(
            f"this attempt started {late.total_seconds():.1f} s after Temporal handed it out,"
            " past its heartbeat timeout: Temporal has retried the step already",
            {"retryable": True, "attempt": info.attempt},
            type="StaleAttemptError",
        )


async def _unless_stale(work: Awaitable[_T], progress: _Progress) -> _T:
    """Await ``work``, cancelling it when Temporal cancels the activity, except when the
    attempt went stale (``_stale_attempt``): a worker that stalled or froze past the
    heartbeat timeout, while Temporal retried the step elsewhere. Such an attempt goes on
    under the workflow's lease (D27) to its end, and the retry, turned away with
    ``WorkflowBusyError`` meanwhile, answers the step from the durable layer; or it stops
    before its next side effect once the retry took the lease over. Interrupting its run
    instead would cut the step short, and the retry would send the step's prompt again."""
    task = asyncio.ensure_future(work)
    while True:
        try:
            return await asyncio.shield(task)
        except asyncio.CancelledError:
            if task.done() or not _stale_attempt(progress):
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
                raise
            current = asyncio.current_task()
            if current is not None:
                current.uncancel()


_PROGRESS: contextvars.ContextVar[_Progress | None] = contextvars.ContextVar(
    "coder_temporal_progress", default=None
)


class DurableActivities:
    """The activities of one worker: ``activities()`` is the list to give Temporal's
    ``Worker``.

    ``store`` is the durable store every step of every workflow uses (a ``PostgresStore`` or
    ``AsyncPostgresStore`` for a fleet of machines; ``SQLiteStore`` for workers on one
    machine); ``tools`` the client tools the steps may call (``crash_safe`` ones are bound to
    the store); ``tenant`` the store's tenant. ``turn_options`` are ``run_turn``'s other
    keywords (``organization_id``, ``model``, ``request_timeout``, ``output_type``...),
    the same for every step. Connection: ``client`` (a ``CoderChatClient`` the caller owns),
    else ``base_url`` / ``token`` (``CODER_URL`` / ``CODER_SESSION_TOKEN``) for a client that
    the activities create on first use and ``aclose()`` closes. ``on_transport_event``
    receives every transport event of that client. ``heartbeat_interval`` (seconds) is how
    often a running turn heartbeats; keep it well under the activities' heartbeat timeout.
    ``sweep_options`` are ``sweep_orphans``' keywords, ``archive_options``
    ``archive_workflow``'s.
    """

    def __init__(
        self,
        *,
        store: Any,
        tools: Sequence[Any] = (),
        tenant: str = DEFAULT_TENANT,
        client: CoderChatClient | None = None,
        base_url: str | None = None,
        token: str | None = None,
        on_transport_event: Callable[[Any], object] | None = None,
        heartbeat_interval: float = 1.0,
        archive_options: dict[str, Any] | None = None,
        sweep_options: dict[str, Any] | None = None,
        **turn_options: Any,
    ) -> None:
        if heartbeat_interval <= 0:
            raise ValueError("heartbeat_interval must be positive")
        self.store = store
        self.tools = list(tools)
        self.tenant = tenant
        self._client = client
        self._owns_client = client is None
        self._base_url = base_url
        self._token = token
        self._on_transport_event = on_transport_event
        self._heartbeat_interval = heartbeat_interval
        self._archive_options = dict(archive_options or {})
        self._sweep_options = dict(sweep_options or {})
        self._turn_options = turn_options

    def __repr__(self) -> str:
        return f"<DurableActivities tenant={self.tenant!r} store={self.store!r}>"

    def activities(self) -> list[Callable[..., Any]]:
        """The activities to register: ``coder.run_turn``, ``coder.archive_workflow`` and
        ``coder.sweep_orphans``."""
        return [self.run_turn, self.archive_workflow, self.sweep_orphans]

    async def aclose(self) -> None:
        """Close the client the activities created (a caller's client stays open)."""
        client, self._client = self._client, None
        if client is not None and self._owns_client:
            await client.aclose()

    async def __aenter__(self) -> DurableActivities:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()

    def _chat_client(self) -> CoderChatClient:
        if self._client is None:
            self._client = CoderChatClient(
                self._base_url, self._token, on_transport_event=self._event
            )
        return self._client

    def _event(self, event: Any) -> None:
        progress = _PROGRESS.get()
        if progress is not None:
            progress.seen(event)
        if self._on_transport_event is not None:
            self._on_transport_event(event)

    async def _heartbeat(self, progress: _Progress) -> None:
        while True:
            progress.beating()
            activity.heartbeat(progress.details())
            await asyncio.sleep(self._heartbeat_interval)

    @contextlib.asynccontextmanager
    async def _heartbeating(
        self, workflow_id: str | None, step: str | None
    ) -> AsyncIterator[_Progress]:
        """Heartbeat the activity's progress while the body runs (Temporal delivers
        cancellation with the heartbeats, and retries elsewhere when they stop)."""
        info = activity.info()
        progress = _Progress(workflow_id, step, info.attempt)
        if info.heartbeat_timeout:
            progress.heartbeat_timeout = info.heartbeat_timeout.total_seconds()
        token = _PROGRESS.set(progress)
        beating = asyncio.create_task(self._heartbeat(progress))
        try:
            yield progress
        finally:
            _PROGRESS.reset(token)
            beating.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await beating

    async def _perform(
        self,
        workflow_id: str | None,
        step: str | None,
        work: Callable[[], Awaitable[_T]],
        *,
        attempt_bound: bool = True,
    ) -> tuple[_T, _Progress]:
        """What every activity does around its ``work``: heartbeat while it runs; for work
        bound to a workflow attempt (a step, an archive), refuse an attempt that went stale
        before it started (``_check_attempt_current``) and let one that goes stale meanwhile
        run on (``_unless_stale``); raise errors as ``application_error`` maps them. Returns
        the work's result and the activity's progress."""
        if attempt_bound:
            _check_attempt_current()
        try:
            async with self._heartbeating(workflow_id, step) as progress:
                if attempt_bound:
                    result = await _unless_stale(work(), progress)
                else:
                    result = await work()
        except Exception as exc:
            error = application_error(exc)
            if error is None:
                raise
            raise error from exc
        return result, progress

    @activity.defn(name=ACTIVITY_RUN_TURN)
    async def run_turn(self, request: TurnRequest) -> TurnOutcome:
        """Run one durable step (``run_turn``), heartbeating its progress while it runs.
        The workflow's cancellation interrupts the server's run and propagates; an attempt
        that Temporal timed out (its worker stalled past the heartbeat timeout) runs on to its
        end under the workflow's lease, or stops once it lost the lease, while Temporal's retry
        waits for it. Errors are raised as ``application_error`` maps them."""
        result, progress = await self._perform(
            request.workflow_id,
            request.step,
            lambda: run_turn(
                request.workflow_id,
                request.prompt,
                step=request.step,
                store=self.store,
                tenant=request.tenant or self.tenant,
                tools=self.tools,
                client=self._chat_client(),
                **self._turn_options,
            ),
        )
        return TurnOutcome(
            text=result.text,
            recovered=result.recovered,
            chat_id=result.chat_id,
            step=result.step,
            output=_plain(result.output),
            attempt=progress.attempt,
        )

    @activity.defn(name=ACTIVITY_ARCHIVE)
    async def archive_workflow(self, request: ArchiveRequest) -> ArchiveOutcome:
        """Retire the workflow's chats (``archive_workflow``), heartbeating."""
        result, _ = await self._perform(
            request.workflow_id,
            "archive",
            lambda: archive_workflow(
                request.workflow_id,
                store=self.store,
                tenant=request.tenant or self.tenant,
                client=self._chat_client(),
                **self._archive_options,
            ),
        )
        return ArchiveOutcome(
            archived=result.archived,
            chat_id=result.chat_id,
            archived_chat_ids=list(result.archived_chat_ids),
        )

    @activity.defn(name=ACTIVITY_SWEEP)
    async def sweep_orphans(self, request: SweepRequest) -> SweepOutcome:
        """Retire every chat no checkpoint accounts for (``sweep_orphans``), heartbeating."""
        result, _ = await self._perform(
            None,
            "sweep",
            lambda: sweep_orphans(
                store=self.store,
                min_age=request.min_age,
                client=self._chat_client(),
                **self._sweep_options,
            ),
            attempt_bound=False,
        )
        return SweepOutcome(
            archived_chat_ids=list(result.archived_chat_ids),
            failed_chat_ids=[chat for chat, _ in result.failed],
            skipped_chat_ids=list(result.skipped_chat_ids),
        )


# -- the workflow side ------------------------------------------------------------------------


class DurableTurns:
    """The durable steps of the current Temporal workflow, for workflow code.

    ``await turn(prompt, step=...)`` runs one step as the ``coder.run_turn`` activity and
    returns its ``TurnOutcome``; ``await archive()`` retires the workflow's chats (call it
    once, at the end or in the failure path). The durable workflow id is the Temporal
    workflow id (or ``workflow_id``), so every attempt of a step, on any worker, recovers the
    same chat. Deterministic: it reads nothing but ``workflow.info()``.

    ``task_queue`` defaults to the workflow's; ``start_to_close_timeout`` bounds one attempt
    of a step (make it longer than a turn, recovery included), ``archive_timeout`` one
    attempt of the archive; ``heartbeat_timeout`` is how soon a step or archive whose worker
    stopped heartbeating is retried elsewhere (longer than the workers'
    ``heartbeat_interval`` and their longest event-loop stall); ``retry_policy`` defaults to
    ``DEFAULT_RETRY_POLICY``.
    """

    def __init__(
        self,
        *,
        workflow_id: str | None = None,
        tenant: str | None = None,
        task_queue: str | None = None,
        start_to_close_timeout: timedelta = timedelta(minutes=30),
        heartbeat_timeout: timedelta = timedelta(seconds=30),
        archive_timeout: timedelta = timedelta(minutes=5),
        retry_policy: RetryPolicy | None = None,
    ) -> None:
        self._workflow_id = workflow_id
        self.tenant = tenant
        self.task_queue = task_queue
        self.start_to_close_timeout = start_to_close_timeout
        self.heartbeat_timeout = heartbeat_timeout
        self.archive_timeout = archive_timeout
        self.retry_policy = retry_policy if retry_policy is not None else DEFAULT_RETRY_POLICY

    @property
    def workflow_id(self) -> str:
        """The durable workflow id: the Temporal workflow id unless one was given."""
        return self._workflow_id or workflow.info().workflow_id

    async def turn(self, prompt: str, *, step: str | None = None) -> TurnOutcome:
        """Run one durable step of this workflow on a worker (``coder.run_turn``)."""
        result: TurnOutcome = await workflow.execute_activity(
            ACTIVITY_RUN_TURN,
            TurnRequest(self.workflow_id, prompt, step=step, tenant=self.tenant),
            result_type=TurnOutcome,
            task_queue=self.task_queue,
            start_to_close_timeout=self.start_to_close_timeout,
            heartbeat_timeout=self.heartbeat_timeout,
            retry_policy=self.retry_policy,
        )
        return result

    async def archive(self) -> ArchiveOutcome:
        """Retire this workflow's chats (``coder.archive_workflow``)."""
        result: ArchiveOutcome = await workflow.execute_activity(
            ACTIVITY_ARCHIVE,
            ArchiveRequest(self.workflow_id, tenant=self.tenant),
            result_type=ArchiveOutcome,
            task_queue=self.task_queue,
            start_to_close_timeout=self.archive_timeout,
            heartbeat_timeout=self.heartbeat_timeout,
            retry_policy=self.retry_policy,
        )
        return result


@workflow.defn(name="coder.OrphanSweep")
class OrphanSweepWorkflow:
    """The orphan sweep as a workflow, to run on a Temporal schedule
    (``client.create_schedule``) or once: one ``coder.sweep_orphans`` activity. Give
    ``min_age`` longer than a first turn can take when workflows may be running."""

    @workflow.run
    async def run(self, request: SweepRequest) -> SweepOutcome:
        """Sweep once."""
        result: SweepOutcome = await workflow.execute_activity(
            ACTIVITY_SWEEP,
            request,
            result_type=SweepOutcome,
            start_to_close_timeout=timedelta(minutes=30),
            heartbeat_timeout=timedelta(seconds=request.heartbeat_timeout),
            retry_policy=DEFAULT_RETRY_POLICY,
        )
        return result
