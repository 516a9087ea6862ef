"""Fault injection on the pure model: deterministic drops, rejections, failures, delays,
stalls and capacity stalls (issue: "Fault injection"; server-behaviour 8.11, 8.13)."""

from __future__ import annotations

import json

import pytest

from coder_proto.fake import FakeHttpResponse, Faults, Say, Script, StreamSubscription, Wait

from .support import V2, Api, statuses, types

SLOW = Script((Say("a b c d e f g h"),))


def open_stream(api: Api, chat_id: str) -> StreamSubscription:
    sub = api.model.handle_upgrade(f"{V2}/{chat_id}/stream", api.headers, api.now)
    assert isinstance(sub, StreamSubscription), sub
    return sub


def drain(
    api: Api, sub: StreamSubscription, *, until: float = 5.0, step: float = 0.01
) -> list[bytes]:
    frames = []
    end = api.now + until
    while api.now < end and not sub.closed:
        frames += sub.pull(api.now)
        api.now += step
    return frames


def test_drop_after_frames_applies_to_the_next_connections_only() -> None:
    api = Api(chunk_delay=0.05)
    chat_id = api.create("x", script=SLOW)
    api.model.faults.drop_stream_after_frames(2, times=1)
    first = open_stream(api, chat_id)
    frames = drain(api, first)
    assert len(frames) == 2
    assert first.closed and first.close_code is None, "no close frame, no final event"
    second = open_stream(api, chat_id)
    assert len(drain(api, second, until=1.0)) > 2
    assert not second.closed


def test_drop_after_zero_frames_closes_right_after_the_upgrade() -> None:
    api = Api()
    chat_id = api.create("x")
    api.model.faults.drop_stream_after_frames(0, close_code=1011)
    sub = open_stream(api, chat_id)
    assert sub.pull(api.now) == []
    assert sub.closed and sub.close_code == 1011


def test_drop_at_event_delivers_everything_before_it() -> None:
    api = Api(chunk_delay=0.05)
    chat_id = api.create("x", script=SLOW)
    api.model.faults.drop_stream_at("message_part", occurrence=3)
    sub = open_stream(api, chat_id)
    events = [e for f in drain(api, sub) for e in json.loads(f)]
    assert [e["message_part"]["seq"] for e in events if e["type"] == "message_part"] == [1, 2]
    assert sub.closed


def test_close_before_terminal_status() -> None:
    """The client never sees the turn settle on that connection (turn-04); a redial does."""
    api = Api()
    chat_id = api.create("x")
    api.model.faults.close_before_terminal_status()
    sub = open_stream(api, chat_id)
    events = [e for f in drain(api, sub) for e in json.loads(f)]
    assert sub.closed
    assert statuses(events) == ["running"]
    assert "message_part" in types(events)
    redial = open_stream(api, chat_id)
    assert "waiting" in statuses([e for f in drain(api, redial, until=0.1) for e in json.loads(f)])


def test_drop_at_a_specific_status() -> None:
    api = Api(interrupt_delay=0.5)
    chat_id = api.create("x", script=Script((Say("a"), Wait(5.0))))
    api.model.faults.drop_stream_at("status", status="interrupting")
    sub = open_stream(api, chat_id)
    sub.pull(api.now)
    api.interrupt(chat_id)
    assert sub.pull(api.now) == []
    assert sub.closed


def test_delay_frames_holds_every_frame_back() -> None:
    api = Api()
    chat_id = api.create("x")
    api.model.faults.delay_frames(0.5)
    sub = open_stream(api, chat_id)
    assert sub.pull(api.now) == []
    assert sub.next_deadline() == pytest.approx(api.now + 0.5)
    api.now += 0.5
    assert sub.pull(api.now)


def test_stall_forever_keeps_the_socket_open_and_silent() -> None:
    api = Api()
    chat_id = api.create("x")
    api.model.faults.stall_frames(after_frames=1)
    sub = open_stream(api, chat_id)
    assert len(drain(api, sub, until=2.0)) == 1
    assert not sub.closed
    assert sub.next_deadline() is None


def test_stall_for_a_while_then_release_in_order() -> None:
    api = Api()
    chat_id = api.create("x")
    api.model.faults.stall_frames(after_frames=1, seconds=1.0)
    sub = open_stream(api, chat_id)
    first = sub.pull(api.now)
    assert len(first) == 1
    api.now += 0.5
    assert sub.pull(api.now) == []
    api.now += 0.6
    later = sub.pull(api.now)
    assert later, "the stalled frames come out after the stall"


def test_random_drops_are_deterministic_by_seed() -> None:
    def run(seed: int) -> int:
        api = Api(chunk_delay=0.01)
        chat_id = api.create("x", script=Script((Say("w " * 40),)))
        api.model.faults.drop_streams_randomly(0.2, seed=seed)
        sub = open_stream(api, chat_id)
        return len(drain(api, sub))

    assert run(7) == run(7)
    assert {run(s) for s in range(8)} != {run(0)}


def test_reject_upgrades_k_times() -> None:
    api = Api()
    chat_id = api.create("x")
    api.model.faults.reject_upgrades(503, times=2)
    outcomes = [
        api.model.handle_upgrade(f"{V2}/{chat_id}/stream", api.headers, 0.0) for _ in range(3)
    ]
    assert [o.status for o in outcomes[:2]] == [503, 503]  # type: ignore[union-attr]
    assert isinstance(outcomes[2], StreamSubscription)
    assert api.model.counters.stream_dials[chat_id] == 3
    assert api.model.counters.streams_accepted[chat_id] == 1
    api.model.faults.reject_upgrades(403, times=None, route="watch", message="nope")
    watch = api.model.handle_upgrade(f"{V2}/watch", api.headers, 0.0)
    assert isinstance(watch, FakeHttpResponse) and watch.json() == {"message": "nope"}
    assert isinstance(
        api.model.handle_upgrade(f"{V2}/{chat_id}/stream", api.headers, 0.0), StreamSubscription
    )


def test_reject_upgrades_for_one_chat_only() -> None:
    api = Api()
    a, b = api.create("a"), api.create("b")
    api.model.faults.reject_upgrades(429, times=None, chat_id=a)
    assert api.model.handle_upgrade(f"{V2}/{a}/stream", api.headers, 0.0).status == 429  # type: ignore[union-attr]
    assert isinstance(
        api.model.handle_upgrade(f"{V2}/{b}/stream", api.headers, 0.0), StreamSubscription
    )


def test_fail_requests_k_times_by_operation() -> None:
    api = Api()
    chat_id = api.create("x", script=Script((Wait(5.0),)))
    api.model.faults.fail_requests("create_chat_message", 500, times=1, detail="injected")
    failed = api.send(chat_id, "q")
    assert failed.status == 500
    assert failed.json() == {"message": "Internal Server Error", "detail": "injected"}
    assert api.model.chats[chat_id].queue == [], "a failed request changes nothing"
    assert api.send(chat_id, "q").status == 200
    api.model.faults.fail_requests("*", 502, times=1)
    assert api.request("GET", f"/{chat_id}").status == 502
    assert api.request("GET", f"/{chat_id}").status == 200


def test_fail_archive_but_not_other_patches() -> None:
    api = Api()
    chat_id = api.create("x")
    api.run_until(chat_id, {"waiting"})
    api.model.faults.fail_requests("archive_chat", 409, times=None, message="busy")
    assert api.request("PATCH", f"/{chat_id}", {"title": "t"}).status == 204
    refused = api.archive(chat_id)
    assert (refused.status, refused.json()["message"]) == (409, "busy")


def test_fail_requests_for_one_chat() -> None:
    api = Api()
    a, b = api.create("a"), api.create("b")
    api.model.faults.fail_requests("get_chat", 503, times=None, chat_id=a)
    assert api.request("GET", f"/{a}").status == 503
    assert api.request("GET", f"/{b}").status == 200


def test_delay_requests() -> None:
    api = Api()
    chat_id = api.create("x")
    api.model.faults.delay_requests("get_chat", 0.25, times=1)
    assert api.request("GET", f"/{chat_id}").delay == 0.25
    assert api.request("GET", f"/{chat_id}").delay == 0.0


def test_capacity_stall_keeps_the_chat_running_without_parts() -> None:
    """Server-behaviour 2.3, 8.13: ``running`` with ``queued_for_capacity`` and no parts."""
    api = Api()
    api.model.faults.stall_runs(2.0)
    chat_id = api.create("x")
    sub = open_stream(api, chat_id)
    events = [e for f in drain(api, sub, until=1.5) for e in json.loads(f)]
    assert "message_part" not in types(events)
    assert statuses(events) == ["running"]
    assert api.chat(chat_id)["queued_for_capacity"] is True
    api.run_until(chat_id, {"waiting"})
    assert "queued_for_capacity" not in api.chat(chat_id)


def test_chatd_disabled_is_503_except_for_reads() -> None:
    api = Api()
    chat_id = api.create("x")
    api.model.faults.chatd_disabled = True
    assert api.request("GET", f"/{chat_id}").status == 200
    refused = api.send(chat_id, "x")
    assert refused.status == 503
    assert refused.json()["message"].startswith("AI Gateway must be enabled")
    upgrade = api.model.handle_upgrade(f"{V2}/{chat_id}/stream", api.headers, 0.0)
    assert isinstance(upgrade, FakeHttpResponse) and upgrade.status == 503
    api.model.faults.clear()
    assert api.send(chat_id, "x").status == 200


def test_clear_removes_every_rule() -> None:
    faults = Faults(seed=3)
    faults.reject_upgrades(500)
    faults.fail_requests("*", 500)
    faults.delay_requests("*", 1.0)
    faults.drop_stream_after_frames(1)
    faults.delay_frames(1.0)
    faults.stall_frames()
    faults.stall_runs(1.0)
    faults.drop_streams_randomly(0.5)
    faults.history_reset_on_connect = True
    faults.clear()
    assert faults == Faults(seed=3)
