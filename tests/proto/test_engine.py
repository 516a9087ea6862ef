"""The coroutine engine every multi-step machine runs on (``coder_proto._engine``): the
adapter-facing protocol, REST through the prefix selector (wire 1.4), deadlines, the runtime's
cancellation (D22) and the no-bare-exception guarantee."""

from __future__ import annotations

import json
from collections.abc import Generator
from typing import Any

import pytest

from coder_proto import CoderAgentError, CoderApiError, CoderNetworkError
from coder_proto._actions import CancelRequest, SendRequest
from coder_proto._engine import CoreMachine, TimedOut
from coder_proto._rest.http import HttpResponse
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._rest.routes import build_get_chat, parse_get_chat
from tests.core_driver import chat_stub


def ok(body: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(status=status, body=json.dumps(body).encode())


class GetChat(CoreMachine[Any]):
    def __init__(
        self, selector: PrefixSelector, *, now: float = 0.0, deadline: float | None = None
    ) -> None:
        super().__init__(selector)
        self.deadline = deadline
        self._start(now)

    def _run(self) -> Generator[None, None, Any]:
        chat = yield from self._rest(
            build_get_chat("chat-1"), parse_get_chat, deadline=self.deadline
        )
        return chat.status


def sent(machine: CoreMachine[Any]) -> list[SendRequest]:
    return [a for a in machine.actions() if isinstance(a, SendRequest)]


def test_a_request_is_sent_and_its_classified_answer_is_the_result() -> None:
    machine = GetChat(PrefixSelector())
    (action,) = sent(machine)
    assert action.request.path == "/api/v2/chats/chat-1"
    assert machine.next_deadline() is None
    machine.response_received(action.request_id, ok(chat_stub(status="waiting")), 1.0)
    assert machine.done and machine.result() == "waiting"
    assert machine.now == 1.0


def test_a_v2_404_is_retried_once_on_the_legacy_prefix_with_a_new_request_id() -> None:
    selector = PrefixSelector()
    machine = GetChat(selector)
    (first,) = sent(machine)
    machine.response_received(first.request_id, HttpResponse(status=404), 0.1)
    (second,) = sent(machine)
    assert second.request_id != first.request_id
    assert second.request.path == "/api/experimental/chats/chat-1"
    machine.response_received(second.request_id, ok(chat_stub()), 0.2)
    assert machine.result() == "running"
    assert selector.prefix == "/api/experimental/chats"


def test_an_http_error_raises_the_operations_typed_error() -> None:
    machine = GetChat(PrefixSelector("/api/v2/chats"))
    (action,) = sent(machine)
    machine.response_received(action.request_id, ok({"message": "nope"}, 403), 0.0)
    with pytest.raises(CoderApiError) as info:
        machine.result()
    assert info.value.status == 403


def test_a_network_failure_raises_a_retryable_network_error() -> None:
    machine = GetChat(PrefixSelector())
    (action,) = sent(machine)
    machine.request_failed(action.request_id, "connection refused", 0.0)
    with pytest.raises(CoderNetworkError) as info:
        machine.result()
    assert info.value.retryable is True


def test_answers_for_unknown_or_abandoned_requests_are_ignored() -> None:
    machine = GetChat(PrefixSelector())
    (action,) = sent(machine)
    machine.response_received(999, ok(chat_stub()), 0.0)
    machine.request_failed(998, "late", 0.0)
    assert not machine.done
    machine.response_received(action.request_id, ok(chat_stub()), 0.0)
    assert machine.done


def test_a_request_deadline_abandons_the_request_and_raises_timeout_error() -> None:
    machine = GetChat(PrefixSelector(), deadline=5.0)
    (action,) = sent(machine)
    assert machine.next_deadline() == 5.0
    machine.tick(4.0)
    assert not machine.done
    machine.tick(5.0)
    assert machine.done
    assert CancelRequest(request_id=action.request_id) in machine.actions()
    with pytest.raises(TimeoutError):
        machine.result()
    assert machine.next_deadline() is None


def test_cancel_finishes_the_machine_as_cancelled_and_abandons_requests() -> None:
    machine = GetChat(PrefixSelector())
    (action,) = sent(machine)
    machine.cancel(2.0)
    assert machine.done and machine.cancelled
    assert machine.actions() == [CancelRequest(request_id=action.request_id)]
    machine.cancel(3.0)  # idempotent once finished
    machine.tick(4.0)  # and inert
    assert machine.actions() == []
    with pytest.raises(CoderAgentError, match="cancelled"):
        machine.result()
    assert isinstance(machine.error, CoderAgentError)


def test_result_before_the_end_is_an_error() -> None:
    machine = GetChat(PrefixSelector())
    with pytest.raises(CoderAgentError, match="not finished"):
        machine.result()


class Broken(CoreMachine[None]):
    def __init__(self) -> None:
        super().__init__(PrefixSelector())
        self._start(0.0)

    def _run(self) -> Generator[None, None, None]:
        yield from self._wait()
        raise KeyError("bug")


def test_a_bug_never_escapes_as_a_bare_exception() -> None:
    machine = Broken()
    machine.tick(1.0)
    assert machine.done
    with pytest.raises(CoderAgentError, match="internal error") as info:
        machine.result()
    assert isinstance(info.value.__cause__, KeyError)


class Sleeper(CoreMachine[float]):
    def __init__(self) -> None:
        super().__init__(PrefixSelector())
        self._start(0.0)

    def _run(self) -> Generator[None, None, float]:
        self._arm_abort_deadline(10.0)
        try:
            yield from self._sleep_until(3.0)
            yield from self._sleep_until(20.0)
        except TimedOut:
            return self.now
        return -1.0


def test_sleeps_and_the_abort_deadline_are_deadlines_and_the_abort_wins() -> None:
    machine = Sleeper()
    assert machine.next_deadline() == 3.0
    machine.tick(3.0)
    assert machine.next_deadline() == 10.0
    machine.tick(2.0)  # time never goes backwards
    assert machine.now == 3.0
    machine.tick(10.0)
    assert machine.result() == 10.0


class Forgetful(CoreMachine[None]):
    """Begins a request and ends without waiting for it."""

    def __init__(self) -> None:
        super().__init__(PrefixSelector())
        self._start(0.0)

    def _run(self) -> Generator[None, None, None]:
        self._begin_call(build_get_chat("chat-1"))
        return None
        yield  # pragma: no cover - makes this a generator


def test_requests_still_outstanding_when_a_machine_ends_are_cancelled() -> None:
    machine = Forgetful()
    send, cancel = machine.actions()
    assert isinstance(send, SendRequest)
    assert cancel == CancelRequest(request_id=send.request_id)
    assert machine.result() is None and machine.error is None


def test_the_abort_deadline_is_public_while_armed_and_none_once_it_fired() -> None:
    """C.3: ``abort_deadline`` is the time the machine gives up (what a blocking adapter
    bounds its request by); it reads ``None`` once the deadline fired or the machine ended."""
    machine = Sleeper()
    assert machine.abort_deadline == 10.0
    machine.tick(3.0)
    assert machine.abort_deadline == 10.0
    machine.tick(10.0)
    assert machine.done and machine.abort_deadline is None


def test_a_cancelled_machine_has_no_abort_deadline_d22() -> None:
    machine = Sleeper()
    machine.cancel(1.0)
    assert machine.done and machine.cancelled
    assert machine.abort_deadline is None and machine.next_deadline() is None


def test_a_machine_that_never_armed_one_has_no_abort_deadline() -> None:
    machine = GetChat(PrefixSelector(), deadline=5.0)
    assert machine.abort_deadline is None  # a request's own deadline is not the abort one
    assert machine.next_deadline() == 5.0


class BoundedGetChat(CoreMachine[Any]):
    """Arms the abort deadline ``abort``, then waits for one request until ``deadline``."""

    def __init__(self, *, abort: float | None, deadline: float | None) -> None:
        super().__init__(PrefixSelector("/api/v2/chats"))
        self.abort = abort
        self.deadline = deadline
        self._start(0.0)

    def _run(self) -> Generator[None, None, Any]:
        self._arm_abort_deadline(self.abort)
        try:
            chat = yield from self._rest(
                build_get_chat("chat-1"), parse_get_chat, deadline=self.deadline
            )
        except TimedOut:
            return "aborted"
        return chat.status


@pytest.mark.parametrize(
    ("abort", "deadline", "expected"),
    [
        (None, None, None),
        (None, 5.0, 5.0),
        (10.0, None, 10.0),
        (10.0, 5.0, 5.0),
        (3.0, 5.0, 3.0),
    ],
)
def test_a_request_is_abandoned_at_its_own_deadline_or_the_abort_deadline(
    abort: float | None, deadline: float | None, expected: float | None
) -> None:
    """``request_deadline`` is when the machine gives up a request in flight (what a blocking
    adapter bounds it by): the deadline it waits for it with, or the abort deadline (C.3),
    whichever comes first."""
    machine = BoundedGetChat(abort=abort, deadline=deadline)
    (action,) = sent(machine)
    assert machine.request_deadline(action.request_id) == expected
    assert machine.request_deadline(action.request_id + 1) == abort  # not in flight
    if expected is not None:
        machine.tick(expected)
        assert machine.done and machine.request_deadline(action.request_id) is None
        cancels = [a for a in machine.actions() if isinstance(a, CancelRequest)]
        assert cancels == [CancelRequest(request_id=action.request_id)]


def test_a_retried_request_keeps_its_calls_deadline() -> None:
    """The legacy-prefix retry (wire 1.4) is the same call: the new request id is abandoned
    at the same deadline."""
    machine = GetChat(PrefixSelector(), deadline=5.0)
    (first,) = sent(machine)
    machine.response_received(first.request_id, HttpResponse(status=404), 0.1)
    (second,) = sent(machine)
    assert machine.request_deadline(first.request_id) is None
    assert machine.request_deadline(second.request_id) == 5.0
