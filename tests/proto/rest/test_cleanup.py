"""Stopping and retiring chats (state machines E.5, H.3-H.5; D4, D9, D10, D11,
D22): the session's ``interrupt()``, ``archive()`` and disposal, and the background interrupt
and withdrawal jobs."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from coder_proto import CoderApiError, CoderNetworkError
from coder_proto._constants import ALREADY_ARCHIVED_MESSAGE
from coder_proto._jobs.stopping import InterruptJob, WithdrawJob
from coder_proto._rest.prefix import PrefixSelector
from tests.core_driver import (
    Driver,
    Hang,
    Harness,
    NetworkError,
    Respond,
    action_required,
    chat_stub,
    delta,
    message,
    status,
    weather_tool,
)

V2 = "/api/v2/chats"
INTERRUPT = "POST /api/v2/chats/chat-1/interrupt"
ARCHIVE = "PATCH /api/v2/chats/{}"


def run(h: Harness, machine: Any) -> Any:
    return h.driver.run(machine)


def answers(*replies: Any) -> list[Any]:
    return list(replies)


def paused(h: Harness) -> None:
    turn = h.segment("weather?")
    h.send(
        status("running"),
        message(
            2,
            [{"type": "tool-call", "tool_call_id": "c1", "tool_name": "get_weather", "args": {}}],
        ),
        status("requires_action"),
        action_required(("c1", "get_weather", "{}")),
    )
    assert turn.done and h.session.retained_stream is not None


# -- interrupt() (H.3, D4, D11) -----------------------------------------------------------------------


def test_interrupt_without_any_chat_makes_no_request() -> None:
    h = Harness()
    result = run(h, h.session.interrupt(now=h.now))
    assert result.interrupted is False and result.chat_id is None
    assert h.routes() == []


def test_interrupt_targets_the_session_chat() -> None:
    h = Harness(chat_id="chat-1")
    result = run(h, h.session.interrupt(now=h.now))
    assert result.interrupted is True and result.chat_id == "chat-1"
    assert result.chat.status == "interrupting"
    assert h.routes() == [INTERRUPT]


def test_interrupt_falls_back_to_the_last_known_chat_after_a_reset() -> None:
    h = Harness(chat_id="chat-1")
    h.session.reset_session(h.now)
    result = run(h, h.session.interrupt(now=h.now))
    assert result.chat_id == "chat-1" and h.routes() == [INTERRUPT]


def test_interrupt_errors_propagate() -> None:
    """H.3: a 409 on an idle chat is the caller's to handle."""
    h = Harness(chat_id="chat-1", rest={INTERRUPT: Respond(409, {"message": "idle"})})
    with pytest.raises(CoderApiError) as info:
        run(h, h.session.interrupt(now=h.now))
    assert info.value.status == 409


def test_interrupt_closes_a_paused_stream() -> None:
    """H.6: the interrupt's own settle events must not reach a later resume."""
    h = Harness(tools=(weather_tool(),))
    paused(h)
    run(h, h.session.interrupt(now=h.now))
    assert h.session.retained_stream is None
    assert h.socket.closed_by_client and h.socket.client_close_codes == [1000]


def test_interrupting_a_paused_chat_that_resumed_sends_one_follow_up() -> None:
    """D4: the answer says running while we last saw requires_action."""
    h = Harness(
        tools=(weather_tool(),),
        rest={
            INTERRUPT: answers(
                Respond(200, chat_stub(status="running")),
                Respond(200, chat_stub(status="interrupting")),
            )
        },
    )
    paused(h)
    result = run(h, h.session.interrupt(now=h.now))
    assert h.routes("POST").count(INTERRUPT) == 2
    assert result.chat.status == "interrupting"
    assert h.session.last_status == "interrupting"


def test_no_follow_up_when_the_chat_was_not_paused() -> None:
    h = Harness(chat_id="chat-1", rest={INTERRUPT: Respond(200, chat_stub(status="running"))})
    h.session.last_status = "running"
    run(h, h.session.interrupt(now=h.now))
    assert h.routes().count(INTERRUPT) == 1


def test_a_409_on_the_follow_up_means_the_run_already_stopped() -> None:
    h = Harness(
        chat_id="chat-1",
        rest={
            INTERRUPT: answers(
                Respond(200, chat_stub(status="running")), Respond(409, {"message": "no"})
            )
        },
    )
    h.session.last_status = "requires_action"
    result = run(h, h.session.interrupt(now=h.now))
    assert result.interrupted and result.chat.status == "running"


def test_a_failing_follow_up_other_than_409_propagates() -> None:
    h = Harness(
        chat_id="chat-1",
        rest={
            INTERRUPT: answers(
                Respond(200, chat_stub(status="running")), Respond(500, {"message": "no"})
            )
        },
    )
    h.session.last_status = "requires_action"
    with pytest.raises(CoderApiError):
        run(h, h.session.interrupt(now=h.now))


def test_interrupt_with_wait_polls_every_second_until_settled() -> None:
    """D11: ``?wait=true`` is sent, then the chat is polled until it is settled."""
    h = Harness(
        chat_id="chat-1",
        rest={
            "GET /api/v2/chats/chat-1": answers(
                Respond(200, chat_stub(status="interrupting")),
                Respond(200, chat_stub(status="waiting")),
            )
        },
    )
    start = h.now
    result = run(h, h.session.interrupt(now=h.now, wait=True))
    assert result.chat.status == "waiting"
    assert h.routes() == [
        "POST /api/v2/chats/chat-1/interrupt?wait=true",
        "GET /api/v2/chats/chat-1",
        "GET /api/v2/chats/chat-1",
    ]
    sent_at = [s.at - start for s in h.driver.sent]
    assert sent_at == [0.0, 1.0, 2.0]


def test_interrupt_with_wait_raises_timeout_error_at_its_deadline() -> None:
    h = Harness(chat_id="chat-1", rest={"GET /api/v2/chats/chat-1": chat_stub(status="running")})
    with pytest.raises(TimeoutError):
        run(h, h.session.interrupt(now=h.now, wait=True, timeout=3.5))
    assert h.now <= h.driver.sent[0].at + 3.5


def test_interrupt_with_wait_on_an_already_settled_answer_does_not_poll() -> None:
    h = Harness(chat_id="chat-1", rest={INTERRUPT: chat_stub(status="waiting")})
    run(h, h.session.interrupt(now=h.now, wait=True))
    assert h.routes() == ["POST /api/v2/chats/chat-1/interrupt?wait=true"]


# -- background jobs (E.5, D9, D22) -------------------------------------------------------------------


def job_driver(reply: Any) -> Driver:
    h = Harness(rest={"DELETE /api/v2/chats/chat-1/queue/7": reply, INTERRUPT: reply})
    return h.driver


@pytest.mark.parametrize(
    ("reply", "withdrawn"),
    [
        (Respond(204), True),
        (Respond(404, {"message": "Queued message not found."}), False),
        (Respond(409, {"message": "Chat has no queued messages to delete."}), False),
        (Respond(500, {"message": "boom"}), None),
        (NetworkError(), None),
        (Hang(), None),
    ],
)
def test_withdrawal_reports_the_d9_outcome_and_never_raises(
    reply: Any, withdrawn: bool | None, caplog: pytest.LogCaptureFixture
) -> None:
    driver = job_driver(reply)
    job = WithdrawJob(PrefixSelector(V2), "chat-1", 7, now=driver.now)
    assert "queued_id=7" in repr(job)
    with caplog.at_level(logging.INFO, logger="coder_proto"):
        assert driver.run(job) is withdrawn
    assert driver.routes() == ["DELETE /api/v2/chats/chat-1/queue/7"]
    if withdrawn is False:
        assert any("already promoted" in r.getMessage() for r in caplog.records)


def test_a_hung_withdrawal_is_bounded_at_ten_seconds() -> None:
    driver = job_driver(Hang())
    start = driver.now
    job = WithdrawJob(PrefixSelector(V2), "chat-1", 7, now=start)
    driver.run(job)
    assert driver.now == start + 10.0
    assert driver.sent[0].cancelled


def test_the_interrupt_job_applies_d4_and_reports_the_chat() -> None:
    h = Harness(
        rest={
            INTERRUPT: answers(
                Respond(200, chat_stub(status="running")),
                Respond(200, chat_stub(status="interrupting")),
            )
        }
    )
    job = InterruptJob(PrefixSelector(), "chat-1", now=h.now, last_status="requires_action")
    assert "chat-1" in repr(job)
    assert h.driver.run(job).status == "interrupting"
    assert h.routes().count(INTERRUPT) == 2


@pytest.mark.parametrize("reply", [Respond(409, {"message": "idle"}), NetworkError(), Hang()])
def test_a_failing_interrupt_job_logs_and_returns_none(reply: Any) -> None:
    driver = job_driver(reply)
    job = InterruptJob(PrefixSelector(V2), "chat-1", now=driver.now)
    assert driver.run(job) is None


# -- archive() (H.4, D10) -------------------------------------------------------------------------------


def test_archive_without_any_chat_makes_no_request() -> None:
    h = Harness()
    assert run(h, h.session.archive(now=h.now)).archived is False
    assert h.routes() == []


def test_archive_retires_the_stranded_chats_first_then_the_primary() -> None:
    """H.4, J.23: targets = dedupe(stranded ++ [primary]), each cleared only after its own
    archive succeeded."""
    h = Harness(chat_id="chat-1")
    for chat in ("s1", "s2", "chat-1"):
        h.session.add_stranded(chat)
    result = run(h, h.session.archive(now=h.now))
    assert result.archived and result.chat_id == "chat-1"
    assert result.archived_chat_ids == ("s1", "s2", "chat-1")
    assert h.routes() == [ARCHIVE.format(c) for c in ("s1", "s2", "chat-1")]
    assert [r.json for r in h.driver.requests()] == [{"archived": True}] * 3
    assert h.session.stranded_chat_ids == ()
    assert h.session.last_known_chat_id is None and h.session.chat_id == "chat-1"


def test_archive_retries_only_409_about_every_second_then_raises_the_last() -> None:
    h = Harness(
        chat_id="chat-1",
        settle_deadline=3.5,
        rest={"PATCH /api/v2/chats/chat-1": Respond(409, {"message": "active"})},
    )
    start = h.now
    with pytest.raises(CoderApiError) as info:
        run(h, h.session.archive(now=h.now))
    assert info.value.status == 409
    assert [s.at - start for s in h.driver.sent] == [0.0, 1.0, 2.0, 3.0]
    assert h.session.last_known_chat_id == "chat-1"  # not cleaned up


def test_archive_succeeds_after_the_chat_settles() -> None:
    h = Harness(
        chat_id="chat-1",
        rest={
            "PATCH /api/v2/chats/chat-1": answers(Respond(409, {"message": "active"}), Respond(204))
        },
    )
    result = run(h, h.session.archive(now=h.now))
    assert result.archived_chat_ids == ("chat-1",) and len(h.routes()) == 2


def test_an_already_archived_chat_counts_as_archived() -> None:
    """D10: a repeated archive after a lost 204 answers 400 "Chat is already archived."."""
    h = Harness(
        chat_id="chat-1",
        rest={"PATCH /api/v2/chats/chat-1": Respond(400, {"message": ALREADY_ARCHIVED_MESSAGE})},
    )
    assert run(h, h.session.archive(now=h.now)).archived_chat_ids == ("chat-1",)


def test_a_stranded_chat_that_no_longer_exists_is_dropped_with_a_warning(
    caplog: pytest.LogCaptureFixture,
) -> None:
    h = Harness(
        chat_id="chat-1", rest={"PATCH /api/v2/chats/gone": Respond(404, {"message": "no"})}
    )
    h.session.add_stranded("gone")
    with caplog.at_level(logging.WARNING, logger="coder_proto"):
        result = run(h, h.session.archive(now=h.now))
    assert result.archived_chat_ids == ("chat-1",)
    assert h.session.stranded_chat_ids == ()
    assert any("gone" in r.getMessage() for r in caplog.records)


def test_every_target_is_attempted_and_the_first_failure_is_raised_with_the_others_noted() -> None:
    """D10: other errors raise at once for their target, but the batch goes on."""
    h = Harness(
        chat_id="chat-1",
        rest={
            "PATCH /api/v2/chats/s1": Respond(500, {"message": "first"}),
            "PATCH /api/v2/chats/s2": Respond(204),
            "PATCH /api/v2/chats/chat-1": Respond(404, {"message": "primary gone"}),
        },
    )
    h.session.add_stranded("s1")
    h.session.add_stranded("s2")
    with pytest.raises(CoderApiError) as info:
        run(h, h.session.archive(now=h.now))
    assert info.value.status == 500
    assert any("primary gone" in note for note in info.value.__notes__)
    assert h.routes() == [ARCHIVE.format(c) for c in ("s1", "s2", "chat-1")]
    assert h.session.stranded_chat_ids == ("s1",)


def test_a_hung_archive_is_cut_by_the_shared_deadline() -> None:
    h = Harness(chat_id="chat-1", rest={"PATCH /api/v2/chats/chat-1": Hang()})
    start = h.now
    with pytest.raises(TimeoutError):
        run(h, h.session.archive(now=h.now))
    assert h.now == start + 15.0


def test_archive_reports_network_failures() -> None:
    h = Harness(chat_id="chat-1", rest={"PATCH /api/v2/chats/chat-1": NetworkError()})
    with pytest.raises(CoderNetworkError):
        run(h, h.session.archive(now=h.now))


def test_archive_closes_a_paused_stream() -> None:
    h = Harness(tools=(weather_tool(),), rest={"PATCH /api/v2/chats/chat-1": Respond(204)})
    paused(h)
    run(h, h.session.archive(now=h.now))
    assert h.socket.closed_by_client and h.session.retained_stream is None


# -- disposal (H.5) ----------------------------------------------------------------------------------


def test_dispose_interrupts_then_archives_and_never_raises() -> None:
    h = Harness(
        chat_id="chat-1",
        rest={
            INTERRUPT: Respond(409, {"message": "Chat is not in an interruptible state."}),
            "PATCH /api/v2/chats/chat-1": Respond(500, {"message": "down"}),
        },
    )
    result = run(h, h.session.dispose(now=h.now))
    assert h.routes() == [INTERRUPT, "PATCH /api/v2/chats/chat-1"]
    assert result.interrupt is None and result.archive is None
    assert [type(e).__name__ for e in result.errors] == ["CoderApiError", "CoderApiError"]


def test_dispose_of_a_session_without_a_chat_does_nothing() -> None:
    h = Harness()
    result = run(h, h.session.dispose(now=h.now))
    assert result.interrupt is not None and result.interrupt.interrupted is False
    assert result.archive is not None and result.archive.archived is False
    assert h.routes() == []


def test_dispose_closes_the_retained_stream_and_is_bounded() -> None:
    h = Harness(tools=(weather_tool(),), rest={"PATCH /api/v2/chats/chat-1": Hang()})
    paused(h)
    start = h.now
    result = run(h, h.session.dispose(now=h.now))
    assert h.socket.closed_by_client
    assert result.interrupt is not None and result.interrupt.interrupted
    assert h.now <= start + 15.0 + 1e-9
    assert [type(e) for e in result.errors] == [TimeoutError]


def test_interrupt_during_a_running_turn_leaves_its_stream_to_it() -> None:
    """H.3: only a paused stream is closed; the running segment reads the interrupt's
    settle and ends on it."""
    h = Harness()
    turn = h.generate("hi")
    h.send(status("running"), delta("partial"))
    interrupt = h.session.interrupt(now=h.now)
    h.driver.background.append(interrupt)
    h.driver.settle()
    assert interrupt.done and interrupt.result().interrupted
    assert h.socket.open and not turn.done
    h.send(status("interrupting"), message(2, "partial"), status("waiting"))
    assert turn.result().text == "partial"


def test_the_raw_interrupt_call_waits_for_the_chat_to_settle() -> None:
    """D11 for ``interrupt_chat(chat_id, wait=True)``."""
    from coder_proto._jobs.stopping import ChatInterrupt

    h = Harness(
        rest={
            "GET /api/v2/chats/chat-1": [
                Respond(200, chat_stub(status="interrupting")),
                Respond(200, chat_stub(status="error")),
            ]
        }
    )
    chat = h.driver.run(ChatInterrupt(PrefixSelector(V2), "chat-1", now=h.now, wait=True))
    assert chat.status == "error" and len(h.routes()) == 3
    plain = h.driver.run(ChatInterrupt(PrefixSelector(V2), "chat-1", now=h.now))
    assert plain.status == "interrupting"
    assert h.routes()[-1] == INTERRUPT
    with pytest.raises(CoderApiError):
        h.env.rest["POST /api/experimental/chats/chat-1/interrupt"] = Respond(
            409, {"message": "idle"}
        )
        h.driver.run(ChatInterrupt(PrefixSelector(V2), "chat-1", now=h.now))


# -- a chat paused at a queued message under edit (D35) ---------------------------------------------

GET_CHAT = "GET /api/v2/chats/chat-1"
PAUSED_ARCHIVE = (
    "Cannot archive: a chat in this family is paused at a queued message under edit. "
    "Finish editing, send, or remove that message first."
)
NOT_INTERRUPTIBLE = Respond(409, {"message": "Chat is not in an interruptible state."})


def test_d35_interrupting_a_paused_chat_returns_it_at_once() -> None:
    h = Harness(
        chat_id="chat-1",
        rest={INTERRUPT: NOT_INTERRUPTIBLE, GET_CHAT: Respond(200, chat_stub(status="paused"))},
    )
    h.session.last_status = "paused"
    result = run(h, h.session.interrupt(now=h.now, wait=True))
    assert result.interrupted is True and result.chat.status == "paused"
    assert h.routes() == [INTERRUPT + "?wait=true", GET_CHAT]
    assert h.session.last_status == "paused"


def test_d35_an_interrupt_409_of_a_chat_that_is_not_paused_is_raised() -> None:
    # Read once, not paused: the 409 is the caller's (H.3).
    h = Harness(chat_id="chat-1", rest={INTERRUPT: NOT_INTERRUPTIBLE})
    with pytest.raises(CoderApiError) as info:
        run(h, h.session.interrupt(now=h.now))
    assert info.value.status == 409 and h.routes() == [INTERRUPT, GET_CHAT]
    # The read failed: still the 409.
    h = Harness(
        chat_id="chat-1",
        rest={INTERRUPT: NOT_INTERRUPTIBLE, GET_CHAT: Respond(500, {"message": "down"})},
    )
    with pytest.raises(CoderApiError) as info:
        run(h, h.session.interrupt(now=h.now))
    assert info.value.status == 409
    # Last seen waiting: no read at all.
    h = Harness(chat_id="chat-1", rest={INTERRUPT: NOT_INTERRUPTIBLE})
    h.session.last_status = "waiting"
    with pytest.raises(CoderApiError):
        run(h, h.session.interrupt(now=h.now))
    assert h.routes() == [INTERRUPT]


def test_d35_the_raw_interrupt_of_a_paused_chat_returns_it() -> None:
    from coder_proto._jobs.stopping import ChatInterrupt

    h = Harness(
        rest={
            "POST /api/v2/chats/chat-1/interrupt": NOT_INTERRUPTIBLE,
            GET_CHAT: Respond(200, chat_stub(status="paused")),
        }
    )
    chat = h.driver.run(ChatInterrupt(PrefixSelector(V2), "chat-1", now=h.now, wait=True))
    assert chat.status == "paused" and len(h.routes()) == 2


def test_d35_archiving_a_paused_chat_raises_at_once_without_retrying() -> None:
    h = Harness(
        chat_id="chat-1",
        rest={"PATCH /api/v2/chats/chat-1": Respond(409, {"message": PAUSED_ARCHIVE})},
    )
    with pytest.raises(CoderApiError) as info:
        run(h, h.session.archive(now=h.now))
    error = info.value
    assert (error.status, error.retryable, error.server_message) == (409, False, PAUSED_ARCHIVE)
    assert "queue head is under edit" in str(error) and "chat-1" in str(error)
    assert isinstance(error.__cause__, CoderApiError)
    assert len(h.routes()) == 1


def test_dispose_after_a_completed_turn_archives_without_interrupting() -> None:
    """H.5: the chat's last status is settled (D1) and no turn is in flight: nothing runs on
    it, so closing sends the archive alone (an interrupt would only be answered 409)."""
    h = Harness()
    turn = h.generate("hi")
    h.send(status("running"), message(2, "ok"), status("waiting"))
    assert turn.done
    before = len(h.routes())
    result = run(h, h.session.dispose(now=h.now))
    assert h.routes()[before:] == [ARCHIVE.format("chat-1")]
    assert result.interrupt is not None
    assert (result.interrupt.interrupted, result.interrupt.chat_id) == (False, "chat-1")
    assert result.archive is not None and result.archive.archived
    assert result.errors == ()


@pytest.mark.parametrize("last", ["running", "requires_action", None])
def test_dispose_interrupts_a_chat_not_known_to_be_settled(last: str | None) -> None:
    h = Harness(chat_id="chat-1")
    h.session.last_status = last
    run(h, h.session.dispose(now=h.now))
    assert h.routes() == [INTERRUPT, ARCHIVE.format("chat-1")]


def test_dispose_interrupts_while_a_turn_is_in_flight_on_a_settled_chat() -> None:
    """The last status seen was settled, but a new turn is under way: it may have started a
    run the session has not heard of yet, so closing interrupts it."""
    h = Harness(rest={"POST /api/v2/chats/chat-1/messages": Hang()})
    first = h.generate("hi")
    h.send(status("running"), message(2, "ok"), status("waiting"))
    assert first.done
    second = h.generate("again")
    assert not second.done and h.session.in_flight is second
    before = len(h.routes())
    run(h, h.session.dispose(now=h.now))
    assert INTERRUPT in h.routes()[before:]
