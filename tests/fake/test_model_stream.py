"""The pure model's stream: server-behaviour 3.3-3.5 and section 8 items 1, 2, 4, 5, 8, 9, 11;
watch events (section 6); D14, D15."""

from __future__ import annotations

import json

import pytest

from coder_proto._wire import parse_frame
from coder_proto.fake import (
    CallClientTool,
    CallServerTool,
    Cite,
    Fail,
    Retry,
    Say,
    Script,
    Think,
    Wait,
)
from coder_proto.fake._faults import SUBSCRIBE_FAILED
from coder_proto.fake._rows import ZERO_VALUE_KEYS

from .support import (
    WEATHER_TOOL,
    Api,
    delta_text,
    messages_of,
    statuses,
    text_of,
    types,
)

LONG = Script((Say("partial answer "), Wait(10.0), Say("the rest")))
TOOL = Script(
    (CallClientTool(name="get_weather", args={"city": "Paris"}), Say("It is {tool_result}."))
)


def parts(events: list[dict]) -> list[dict]:
    return [e["message_part"] for e in events if e["type"] == "message_part"]


def test_first_sync_is_messages_status_preview_reset_then_parts_from_seq_1() -> None:
    api = Api()
    chat_id = api.create("hello", script=Script((Say("one two three"),)))
    stream = api.stream(chat_id)
    first = stream.pull()
    assert types(first) == ["message", "status:running", "preview_reset"]
    assert first[0]["message"]["role"] == "user"
    assert all(e["chat_id"] == chat_id for e in first)
    events = stream.pull_until_status({"waiting"})
    deltas = parts(events)
    assert [p["seq"] for p in deltas] == [1, 2, 3]
    assert {(p["history_version"], p["generation_attempt"]) for p in deltas} == {
        (deltas[0]["history_version"], 1)
    }
    assert [p["part"]["text"] for p in deltas] == ["one ", "two ", "three"], (
        "deltas, not cumulative"
    )
    assert all(p["role"] == "assistant" for p in deltas)
    tail = types(events)[len(deltas) :]
    assert tail == ["message", "status:waiting", "preview_reset"]
    assert text_of(messages_of(events)[0]) == "one two three"


def test_sync_order_in_requires_action_with_queue() -> None:
    """messages → queue_update → status → action_required → preview_reset, with the status
    before ``action_required`` and ``args`` as a JSON string (server-behaviour 8.1, 8.8)."""
    api = Api()
    chat_id = api.create("weather", script=TOOL, unsafe_dynamic_tools=[WEATHER_TOOL])
    api.run_until(chat_id, {"requires_action"})
    api.send(chat_id, "queued")
    events = api.stream(chat_id).pull()
    assert types(events) == [
        "message",
        "message",
        "queue_update",
        "status:requires_action",
        "action_required",
        "preview_reset",
    ]
    calls = events[4]["action_required"]["tool_calls"]
    assert calls == [
        {
            "tool_call_id": api.pending_ids(chat_id)[0],
            "tool_name": "get_weather",
            "args": '{"city":"Paris"}',
        }
    ]
    assert [q["content"][0]["text"] for q in events[2]["queued_messages"]] == ["queued"]


def test_sync_order_in_error_with_queue() -> None:
    api = Api()
    chat_id = api.create("x", script=Script((Wait(1.0), Fail(message="boom", kind="timeout"))))
    api.send(chat_id, "later")
    api.run_until(chat_id, {"error"})
    events = api.stream(chat_id).pull()
    assert types(events) == ["message", "queue_update", "status:error", "error", "preview_reset"]
    assert events[3]["error"] == {"message": "boom", "kind": "timeout", "retryable": False}


def test_live_turn_then_requires_action_and_resume_on_one_socket() -> None:
    api = Api()
    chat_id = api.create("weather", script=TOOL, unsafe_dynamic_tools=[WEATHER_TOOL])
    stream = api.stream(chat_id)
    events = stream.pull_until_status({"requires_action"})
    deltas = parts(events)
    args = [p["part"] for p in deltas if p["part"]["type"] == "tool-call"]
    assert "".join(a["args_delta"] for a in args[:-1]) == '{"city":"Paris"}'
    assert args[-1]["args"] == {"city": "Paris"} and "args_delta" not in args[-1]
    last_part = max(n for n, e in enumerate(events) if e["type"] == "message_part")
    tail = types(events)[last_part + 1 :]
    assert tail == ["message", "status:requires_action", "action_required", "preview_reset"]
    call_id = api.pending_ids(chat_id)[0]
    assert api.results(chat_id, [{"tool_call_id": call_id, "output": {"c": 21}}]).status == 204
    after = stream.pull()
    assert types(after) == ["message", "status:running", "preview_reset"]
    assert after[0]["message"]["role"] == "tool"
    rest = stream.pull_until_status({"waiting"})
    assert delta_text(rest) == 'It is {"c":21}.'
    assert "action_required" not in types(rest), "sent once per history version"


def test_after_id_filters_the_first_sync_only() -> None:
    """Server-behaviour 3.3: messages with id <= after_id are skipped in the first sync;
    live events afterwards are not filtered, whatever their id."""
    api = Api()
    chat_id = api.create("hello", script=Script((Wait(1.0), Say("answer"))))
    user_id = api.messages(chat_id)["messages"][0]["id"]
    filtered = api.stream(chat_id, after_id=user_id).pull()
    assert types(filtered) == ["status:running", "preview_reset"]
    unfiltered = api.stream(chat_id, after_id=user_id - 1).pull()
    assert types(unfiltered)[0] == "message"
    high = api.stream(chat_id, after_id=10**12)
    assert "message" not in types(high.pull())
    live = high.pull_until_status({"waiting"})
    assert [m["role"] for m in messages_of(live)] == ["assistant"], "live events ignore after_id"


def test_edited_chat_sends_history_reset_and_full_history_on_every_connect() -> None:
    """D15 / server-behaviour 3.3: ``after_id`` is ignored for an edited chat."""
    api = Api()
    chat_id = api.create("first")
    api.run_until(chat_id, {"waiting"})
    api.send(chat_id, "second")
    api.run_until(chat_id, {"waiting"})
    history = api.messages(chat_id)["messages"]
    target = history[1]["id"]  # the second user message
    live = api.stream(chat_id, after_id=10**12)
    live.pull()
    response = api.request(
        "PATCH", f"/{chat_id}/messages/{target}", {"content": [{"type": "text", "text": "edited"}]}
    )
    assert response.status == 200
    edit_sync = live.pull()
    assert types(edit_sync)[0] == "history_reset"
    replayed = messages_of(edit_sync)
    visible = [m["id"] for m in api.messages(chat_id)["messages"]][::-1]
    assert [m["id"] for m in replayed] == visible
    assert text_of(replayed[-1]) == "edited"
    assert "status:running" in types(edit_sync)
    for after_id in (None, 1, 10**12):
        first = api.stream(chat_id, after_id=after_id).pull()
        assert types(first)[0] == "history_reset"
        assert [m["id"] for m in messages_of(first)] == visible


def test_history_reset_on_connect_fault_without_an_edit() -> None:
    api = Api()
    chat_id = api.create("hello")
    api.run_until(chat_id, {"waiting"})
    api.model.faults.history_reset_on_connect = True
    events = api.stream(chat_id, after_id=10**12).pull()
    assert types(events)[0] == "history_reset"
    assert len(messages_of(events)) == 2


def test_reconnect_replays_the_current_episode_from_seq_1() -> None:
    """Server-behaviour 8.4: after the snapshot, the in-progress episode's parts are
    replayed from ``seq`` 1, then continue live."""
    api = Api(chunk_delay=0.1)
    chat_id = api.create("hello", script=Script((Say("a b c d e f"),)))
    first = api.stream(chat_id)
    first.pull()
    api.advance(0.35)
    early = parts(first.pull())
    assert [p["seq"] for p in early] == [1, 2, 3]
    second = api.stream(chat_id, after_id=10**12)
    snapshot = second.pull()
    assert types(snapshot)[:2] == ["status:running", "preview_reset"]
    replay = parts(snapshot)
    assert [p["seq"] for p in replay] == [1, 2, 3]
    assert [p["part"] for p in replay] == [p["part"] for p in early]
    api.advance(0.1)
    assert [p["seq"] for p in parts(second.pull())] == [4]
    rest = second.pull_until_status({"waiting"})
    assert delta_text(snapshot) + "d " + delta_text(rest) == "a b c d e f"


def test_new_episode_restarts_seq_after_preview_reset() -> None:
    """Server-behaviour 8.5: each model step is a new episode (history changed), and each
    retry a new generation attempt: ``preview_reset`` then ``seq`` from 1."""
    api = Api(chunk_delay=0.01, retry_base_delay=0.5, retry_max_delay=5.0)
    script = Script(
        (
            Say("step one"),
            CallServerTool(name="execute", args={"c": 1}, result={"ok": True}),
            Say("retry me"),
            Retry(times=2, error="overloaded", kind="overloaded", status_code=529),
            Say(" done"),
        )
    )
    chat_id = api.create("go", script=script)
    stream = api.stream(chat_id)
    events = stream.pull_until_status({"waiting"})
    episodes: list[tuple[int, int]] = []
    seqs: dict[tuple[int, int], list[int]] = {}
    for p in parts(events):
        key = (p["history_version"], p["generation_attempt"])
        if key not in seqs:
            episodes.append(key)
            seqs[key] = []
        seqs[key].append(p["seq"])
    assert all(s == list(range(1, len(s) + 1)) for s in seqs.values())
    assert len(episodes) == 4, "step 1, then three attempts of step 2"
    step2 = episodes[1:]
    assert len({hv for hv, _ in step2}) == 1
    assert [ga for _, ga in step2] == [1, 2, 3]
    retries = [e["retry"] for e in events if e["type"] == "retry"]
    assert [r["attempt"] for r in retries] == [1, 2]
    assert [r["delay_ms"] for r in retries] == [500, 1000]
    assert retries[0]["error"] == "overloaded" and retries[0]["status_code"] == 529
    assert retries[0]["retrying_at"].endswith("Z")
    order = types(events)
    for n, kind in enumerate(order):
        if kind == "retry":
            assert "preview_reset" in order[n + 1 : n + 3], "every attempt resets the preview"
    tool_parts = [p for p in parts(events) if p["role"] == "tool"]
    assert tool_parts[0]["part"]["result"] == {"ok": True}


def test_fail_after_retries_emits_retry_then_status_error_and_error() -> None:
    api = Api(retry_base_delay=0.1)
    script = Script(
        (
            Say("x"),
            Fail(
                message="rate limited",
                kind="rate_limit",
                retries=2,
                retryable=True,
                status_code=429,
                provider="anthropic",
            ),
        )
    )
    chat_id = api.create("go", script=script)
    stream = api.stream(chat_id)
    events = stream.pull_until_status({"error"})
    assert [e["retry"]["attempt"] for e in events if e["type"] == "retry"] == [1, 2]
    assert types(events)[-2:] == ["status:error", "error"], "status before error (D2)"
    error = next(e["error"] for e in events if e["type"] == "error")
    assert error == {
        "message": "rate limited",
        "kind": "rate_limit",
        "provider": "anthropic",
        "retryable": True,
        "status_code": 429,
    }
    api.advance(5)
    assert "error" not in types(stream.pull()), "once per history version"
    again = api.stream(chat_id).pull()
    assert "error" in types(again), "re-sent in every snapshot while the status is error"
    assert api.send(chat_id, "try again").json()["queued"] is False
    resumed = stream.pull()
    assert "status:running" in types(resumed)


def test_promotion_at_turn_end_has_no_status_event() -> None:
    """Server-behaviour 8.2: the socket sees the final assistant message, the promoted user
    message, the shorter queue and ``preview_reset``; the status stays ``running``."""
    api = Api(chunk_delay=0.01)
    chat_id = api.create("first", script=Script((Say("one"), Wait(0.5))))
    api.model.config.scripts.push(Script((Wait(0.5), Say("two"))))
    queued = api.send(chat_id, "second").json()["queued_message"]
    stream = api.stream(chat_id)
    stream.pull()
    while api.model.chats[chat_id].queue:
        api.advance(0.01)
        batch = stream.pull()
        assert "status:waiting" not in types(batch)
    promotion = [f for f in stream.frames if any(e["type"] == "queue_update" for e in f)][-1]
    kinds = types(promotion)
    assert kinds == ["message", "message", "queue_update", "preview_reset"]
    assert promotion[1]["message"]["queued_message_id"] == queued["id"]
    assert promotion[2].get("queued_messages", []) == []
    rest = stream.pull_until_status({"waiting"})
    assert statuses(stream.events) == ["running", "waiting"]
    assert delta_text(rest) == "two"


def test_busy_interrupt_shows_interrupting_then_running_with_partial_and_promoted() -> None:
    api = Api(interrupt_delay=0.2)
    chat_id = api.create("long", script=LONG)
    api.advance(0.1)
    stream = api.stream(chat_id)
    stream.pull()
    api.send(chat_id, "now this", busy="interrupt", script=LONG)
    first = stream.pull()
    assert types(first) == ["queue_update", "status:interrupting"]
    api.advance(0.25)
    second = stream.pull()
    assert types(second)[:4] == ["message", "message", "queue_update", "status:running"]
    assert [m["role"] for m in messages_of(second)] == ["assistant", "user"]
    assert text_of(messages_of(second)[0]) == "partial answer "


def test_status_is_level_triggered() -> None:
    """Intermediate statuses between two syncs are never seen (server-behaviour 8.1)."""
    api = Api(chunk_delay=0.0, interrupt_delay=0.0)
    chat_id = api.create("hello")
    api.run_until(chat_id, {"waiting"})
    stream = api.stream(chat_id)
    assert statuses(stream.pull()) == ["waiting"]
    api.send(chat_id, "quick")
    api.advance(0.0)
    batch = stream.pull()
    assert statuses(batch) == [], "running → waiting between two syncs: no status event"
    assert [m["role"] for m in messages_of(batch)] == ["user", "assistant"]
    api.model.config.chunk_delay = 0.01
    api.send(chat_id, "slow", script=LONG)
    api.interrupt(chat_id)
    assert statuses(stream.pull()) == []


def test_queue_update_on_connect_only_if_the_queue_ever_changed() -> None:
    api = Api()
    fresh = api.create("hello")
    assert "queue_update" not in types(api.stream(fresh).pull())
    used = api.create("long", script=LONG)
    qid = api.send(used, "q").json()["queued_message"]["id"]
    api.request("DELETE", f"/{used}/queue/{qid}")
    events = api.stream(used).pull()
    update = next(e for e in events if e["type"] == "queue_update")
    assert update.get("queued_messages", []) == []


def test_deltas_without_coordinates_in_the_legacy_profile() -> None:
    """D14: the fake stamps coordinates except in its legacy profile."""
    api = Api(coordinates=False)
    chat_id = api.create("hi", script=Script((Say("a b"),)))
    events = api.stream(chat_id).pull_until_status({"waiting"})
    for part in parts(events):
        assert set(part) == {"role", "part"}


def test_zero_value_keys_on_every_part_by_default_and_off_on_request() -> None:
    """Wire 3.5: Go serialises ``text``, ``url``, ... on every part, whatever its type."""
    script = Script((Think("hmm"), Say("hi"), Cite(url="https://e.x/", title="E")))
    for zero in (True, False):
        api = Api(zero_value_keys=zero)
        chat_id = api.create("hello", script=script)
        api.send(chat_id, "queued")
        events = api.stream(chat_id).pull_until_status({"waiting"})
        every_part = [p["part"] for p in parts(events)]
        every_part += [p for m in messages_of(events) for p in m["content"]]
        every_part += [
            p
            for e in events
            if e["type"] == "queue_update"
            for q in e.get("queued_messages", [])
            for p in q["content"]
        ]
        assert every_part
        for part in every_part:
            if zero:
                for key, value in ZERO_VALUE_KEYS.items():
                    assert key in part, (key, part)
                    if key not in ("text", "url"):
                        assert part[key] == value
            elif part["type"] != "text" and part["type"] != "reasoning":
                assert "text" not in part
        source = next(p for p in every_part if p["type"] == "source")
        assert source["url"] == "https://e.x/"


def test_frames_hold_at_most_256_events() -> None:
    api = Api(chunk_delay=0.0)
    words = "w " * 600
    chat_id = api.create("big", script=Script((Wait(0.5), Say(words))))
    stream = api.stream(chat_id)
    stream.pull()
    api.advance(0.6)
    stream.pull()
    sizes = [len(f) for f in stream.frames[1:]]
    assert sizes[:2] == [256, 256]
    assert sum(sizes) >= 600
    assert delta_text(stream.events) == words


def test_snapshot_frames_are_split_at_256_events() -> None:
    api = Api(chunk_delay=0.0)
    chat_id = api.create("start")
    for n in range(140):
        api.run_until(chat_id, {"waiting"})
        api.send(chat_id, f"msg {n}")
    api.run_until(chat_id, {"waiting"})
    stream = api.stream(chat_id)
    stream.pull()
    assert len(stream.frames[0]) == 256
    assert len(messages_of(stream.events)) == len(api.model.chats[chat_id].visible_messages())


def test_json_escapes_html_characters_like_go() -> None:
    api = Api()
    chat_id = api.create("<b>&</b>")
    sub = api.stream(chat_id).sub
    raw = b"".join(sub.pull(api.now))
    assert b"\\u003cb\\u003e\\u0026\\u003c/b\\u003e" in raw
    assert json.loads(raw)[0]["message"]["content"][0]["text"] == "<b>&</b>"
    assert b"\\u003c" in api.request("GET", f"/{chat_id}").body


def test_part_buffer_is_bounded_per_episode() -> None:
    api = Api(part_buffer_bytes=400, chunk_delay=0.0)
    chat_id = api.create("big", script=Script((Say("x" * 2000, chunk=50),)))
    api.run_until(chat_id, {"waiting"})
    episode = next(iter(api.model.chats[chat_id].episodes.values()))
    assert 0 < len(episode.parts) < 40
    assert text_of(api.messages(chat_id)["messages"][0]) == "x" * 2000, "the commit is complete"


# -- watch (server-behaviour 6) ---------------------------------------------------------------


def test_watch_events_are_single_objects_without_replay() -> None:
    api = Api()
    before = api.create("before")
    watch = api.watch()
    assert watch.pull() == [], "no snapshot: earlier events are lost"
    chat_id = api.create("weather", script=TOOL, unsafe_dynamic_tools=[WEATHER_TOOL])
    api.run_until(chat_id, {"requires_action"})
    events = watch.pull()
    kinds = [(e["kind"], e["chat"]["id"]) for e in events]
    assert ("created", chat_id) in kinds
    paused = next(e for e in events if e["kind"] == "action_required")
    assert paused["tool_calls"][0]["args"] == '{"city":"Paris"}'
    assert paused["chat"]["status"] == "requires_action"
    assert "files" not in paused["chat"], "the watch chat is lightweight"
    api.run_until(before, {"waiting"})
    finished = [e for e in watch.pull() if e["chat"]["id"] == before]
    assert [e["kind"] for e in finished] == ["status_change"]
    assert finished[0]["chat"]["status"] == "waiting"


def test_watch_promotion_publishes_status_change_running() -> None:
    api = Api()
    chat_id = api.create("one", script=Script((Wait(0.5),)))
    api.send(chat_id, "two")
    watch = api.watch()
    api.advance(0.6)
    changes = [e for e in watch.pull() if e["kind"] == "status_change"]
    assert changes[0]["chat"]["status"] == "running"
    watch.sub.close()
    watch.sub.close()
    assert api.model.counters.open_watches == 0


def test_legacy_envelope_profile_wraps_frames_and_sends_json_pings() -> None:
    """Server-behaviour 9.5: very old servers sent ``{"type": "data", "data": [...]}`` and
    JSON pings; the client's parser unwraps both (D13)."""
    api = Api(legacy_envelopes=True, envelope_ping_interval=1.0)
    chat_id = api.create("hello")
    sub = api.stream(chat_id).sub
    frames = sub.pull(api.now)
    envelope = json.loads(frames[0])
    assert envelope["type"] == "data"
    assert [e["type"] for e in envelope["data"]][:2] == ["message", "status"]
    assert [type(e).__name__ for e in parse_frame(frames[0])][:2] == ["MessageEvent", "StatusEvent"]
    assert sub.next_deadline() == pytest.approx(1.0)
    api.now = 1.0
    pings = [f for f in sub.pull(api.now) if json.loads(f).get("type") == "ping"]
    assert pings == [b'{"type":"ping","data":null}\n']
    assert parse_frame(pings[0]) == []


def test_snapshot_failure_sends_one_error_and_ends() -> None:
    """Server-behaviour 3.1, D34: the whole snapshot is one ``error`` event (no ``kind``,
    ``retryable`` false) in its own frame, then the stream closes with 1000; the run is
    untouched and the next connection is normal."""
    api = Api()
    chat_id = api.create("hello")
    api.model.faults.fail_snapshots(times=1)
    failing = api.stream(chat_id)
    frames = failing.sub.pull(api.now)
    assert frames == [
        b'[{"type":"error","chat_id":"'
        + chat_id.encode()
        + b'","error":{"message":"failed to load initial snapshot","retryable":false}}]\n'
    ]
    assert failing.sub.closed and failing.sub.close_code == 1000
    assert types(api.stream(chat_id).pull())[0] == "message"


def test_a_subscribe_failure_on_a_later_connection() -> None:
    """D34: the server's other session error, put on the second connection by ``skip``."""
    api = Api()
    chat_id = api.create("hello")
    api.model.faults.fail_snapshots(times=1, skip=1, message=SUBSCRIBE_FAILED)
    assert types(api.stream(chat_id).pull())[0] == "message"
    failing = api.stream(chat_id)
    events = failing.pull()
    assert events == [
        {
            "type": "error",
            "chat_id": chat_id,
            "error": {"message": "failed to subscribe to chat updates", "retryable": False},
        }
    ]
    assert failing.sub.closed
    assert types(api.stream(chat_id).pull())[0] == "message"


def test_a_revision_is_re_sent_under_the_same_id_whatever_after_id() -> None:
    """Server-behaviour 3.3: live ``message`` events include re-sends of old ids whose
    revision changed; a client must upsert by id."""
    api = Api()
    chat_id = api.create("hello", script=Script((Say("first version"),)))
    api.run_until(chat_id, {"waiting"})
    assistant = api.messages(chat_id)["messages"][0]
    stream = api.stream(chat_id, after_id=10**12)
    assert messages_of(stream.pull()) == []
    revised = api.model.revise_message(
        chat_id, assistant["id"], [{"type": "text", "text": "second version"}], api.now
    )
    assert revised.id == assistant["id"]
    live = stream.pull()
    assert types(live) == ["message", "preview_reset"]
    assert live[0]["message"]["id"] == assistant["id"]
    assert text_of(live[0]["message"]) == "second version"
    snapshot = messages_of(api.stream(chat_id).pull())
    assert [m["id"] for m in snapshot].count(assistant["id"]) == 1
    assert text_of(snapshot[-1]) == "second version"
    with pytest.raises(KeyError):
        api.model.revise_message(chat_id, 10**9, [], api.now)
