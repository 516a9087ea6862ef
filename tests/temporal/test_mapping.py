"""The Temporal module's pieces that need no server: how step errors map onto Temporal's
retry rules, what crosses the wire, and that only importing the module imports temporalio."""

from __future__ import annotations

import asyncio
import dataclasses
import subprocess
import sys

import pydantic
import pytest
from temporalio.exceptions import ApplicationError

from coder_io_asyncio.temporal import (
    DurableActivities,
    _plain,
    _Progress,
    application_error,
)
from coder_proto import (
    CoderApiError,
    CoderChatError,
    CoderNetworkError,
    CoderStreamError,
)
from coder_proto.durable import DurableStoreError, MemoryStore, RecoveryError, WorkflowBusyError


def _mapped(exc: BaseException) -> ApplicationError:
    error = application_error(exc)
    assert isinstance(error, ApplicationError)
    assert error.type == type(exc).__name__
    assert error.__cause__ is exc
    return error


@pytest.mark.parametrize(
    "exc",
    [
        WorkflowBusyError(tenant="t", workflow_id="wf", owner="w-1"),
        DurableStoreError("the store is down"),
        CoderChatError("the turn timed out", kind="timeout", retryable=True, chat_id="c-1"),
        CoderNetworkError("connection refused"),
        CoderApiError(status=503, method="POST", path="/api/v2/chats"),
        CoderStreamError("the stream is gone", chat_id="c-2"),
    ],
    ids=lambda e: type(e).__name__,
)
def test_passing_failures_are_retryable(exc: BaseException) -> None:
    error = _mapped(exc)
    assert not error.non_retryable
    assert error.details[0]["retryable"] is True


@pytest.mark.parametrize(
    "exc",
    [
        RecoveryError("a committing call has no re-drive path", chat_id="c-1"),
        CoderChatError("the run failed", kind="error", retryable=False, chat_id="c-1"),
        CoderApiError(status=400, method="POST", path="/api/v2/chats/c-1/messages"),
        CoderStreamError("the stream is gone", chat_id="c-2", retryable=False),
        ValueError("prompt must not be empty"),
        TypeError("unexpected keyword"),
    ],
    ids=lambda e: f"{type(e).__name__}-{e}",
)
def test_permanent_failures_are_not_retryable(exc: BaseException) -> None:
    error = _mapped(exc)
    assert error.non_retryable
    assert error.details[0]["retryable"] is False


def test_error_details() -> None:
    chat = _mapped(CoderChatError("timed out", kind="timeout", retryable=True, chat_id="c-9"))
    assert chat.details[0] == {"retryable": True, "chat_id": "c-9", "kind": "timeout"}
    api = _mapped(CoderApiError(status=429, method="GET", path="/api/v2/chats"))
    assert api.details[0]["status"] == 429 and api.details[0]["retryable"] is True
    assert api.message == str(api.__cause__)


def test_other_errors_are_left_to_temporal() -> None:
    assert application_error(RuntimeError("a bug")) is None
    assert application_error(OSError("disk full")) is None
    same = ApplicationError("mine", non_retryable=True)
    assert application_error(same) is same


def test_plain_outputs() -> None:
    class Answer(pydantic.BaseModel):
        city: str

    @dataclasses.dataclass
    class Point:
        x: int

    assert _plain(Answer(city="Oslo")) == {"city": "Oslo"}
    assert _plain(Point(3)) == {"x": 3}
    assert _plain({"a": 1}) == {"a": 1}
    assert _plain(None) is None


def test_progress_details() -> None:
    class Event:
        def __init__(self, type: str) -> None:
            self.type = type

    progress = _Progress("wf", "greet", attempt=2)
    assert progress.details()["phase"] == "starting"
    for kind in ("segment:start", "ws:open", "segment:settle"):
        progress.seen(Event(kind))
    progress.seen(object())
    details = progress.details()
    assert details["workflow_id"] == "wf" and details["step"] == "greet"
    assert details["attempt"] == 2 and details["phase"] == "turn"
    assert (details["segments"], details["segments_settled"], details["events"]) == (1, 1, 3)
    assert details["last_event"] == "segment:settle"


def test_a_stall_past_the_heartbeat_timeout_shows_in_the_progress() -> None:
    """What tells an attempt Temporal timed out (its worker stalled or froze) from one whose
    workflow was cancelled or closed, both of which the server no longer knows."""
    progress = _Progress("wf", "charge", attempt=1)
    progress.beating()
    assert not progress.stalled()  # no heartbeat timeout: never stale
    progress.heartbeat_timeout = 5.0
    assert not progress.stalled()
    progress.beat -= 10.0  # the worker stopped for 10 s since its last tick
    assert progress.stalled()
    progress.beating()
    assert progress.longest_gap >= 10.0 and progress.stalled()


def test_activities_settings() -> None:
    with pytest.raises(ValueError, match="heartbeat_interval"):
        DurableActivities(store=MemoryStore(), heartbeat_interval=0)
    activities = DurableActivities(store=MemoryStore(), tenant="acme")
    assert "acme" in repr(activities)
    assert [a.__name__ for a in activities.activities()] == [
        "run_turn",
        "archive_workflow",
        "sweep_orphans",
    ]

    async def close() -> None:
        async with activities:
            pass
        await activities.aclose()

    asyncio.run(close())


def test_temporalio_is_imported_only_with_the_module() -> None:
    code = (
        "import sys, coder_io_asyncio, coder_io_asyncio.durable, coder_io_common.stores\n"
        "assert 'temporalio' not in sys.modules, 'imported by the library'\n"
        "import coder_io_asyncio.temporal\n"
        "assert 'temporalio' in sys.modules\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)
