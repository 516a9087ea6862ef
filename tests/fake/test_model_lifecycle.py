"""The pure model's lifecycle: every transition and every 409/400 window of
server-behaviour section 2 (and items 2, 3, 6, 7, 8, 9, 10, 12, 14 of section 8), driven
through ``handle_http`` with a manual clock."""

from __future__ import annotations

import itertools

import pytest

from coder_proto.fake import (
    CANCEL_BY_PROMOTION,
    CANCEL_BY_TIMEOUT,
    CANCEL_BY_USER,
    CANCEL_BY_USER_MESSAGE,
    CallClientTool,
    CallServerTool,
    Fail,
    FakeModelSpec,
    Say,
    Script,
    Wait,
)

from .support import WEATHER_TOOL, Api, text_content, text_of

#: Keeps a chat running for 10 s of model time, with partial text streamed before.
LONG = Script((Say("partial answer "), Wait(10.0), Say("the rest")))
#: Pauses in requires_action on a client tool call, then answers with the result.
TOOL = Script(
    (CallClientTool(name="get_weather", args={"city": "Paris"}), Say("It is {tool_result}."))
)
TWO_TOOLS = Script(
    (
        CallClientTool(name="get_weather", args={"city": "Paris"}),
        CallClientTool(name="get_weather", args={"city": "Rome"}),
        Say("done"),
    )
)
FAIL = Script((Say("x"), Fail(message="provider exploded", kind="overloaded", retryable=True)))


def waiting_chat(api: Api) -> str:
    chat_id = api.create("hello")
    api.run_until(chat_id, {"waiting"})
    return chat_id


def running_chat(api: Api) -> str:
    return api.create("long", script=LONG)


def paused_chat(api: Api) -> str:
    chat_id = api.create("weather", script=TOOL, unsafe_dynamic_tools=[WEATHER_TOOL])
    api.run_until(chat_id, {"requires_action"})
    return chat_id


def errored_chat(api: Api, *, queued: bool = False) -> str:
    script = Script((Say("x"), Wait(1.0), Fail(message="boom")))
    chat_id = api.create("fail", script=script)
    if queued:
        assert api.send(chat_id, "queued while running").status == 200
    api.run_until(chat_id, {"error"})
    return chat_id


def interrupting_chat(api: Api, *, queued: bool = False) -> str:
    api.model.config.interrupt_delay = 5.0
    chat_id = running_chat(api)
    api.advance(0.1)
    if queued:
        assert api.send(chat_id, "next").status == 200
    assert api.interrupt(chat_id).status == 200
    assert api.status(chat_id) == "interrupting"
    return chat_id


# -- create (server-behaviour 1.5, 2.2 Create, 8.14) --------------------------------------------


def test_create_returns_201_with_status_running_and_the_prompt_in_history() -> None:
    api = Api()
    response = api.request(
        "POST",
        "",
        {
            "organization_id": api.model.organization_id,
            "content": [{"type": "text", "text": "  hi  "}],
        },
    )
    assert response.status == 201
    chat = response.json()
    assert chat["status"] == "running"
    assert chat["title"] == "hi"
    assert chat["children"] == []
    assert chat["root_chat_id"] == chat["id"], "a root chat is its own root"
    assert chat["last_turn_summary"] is None and chat["summary"] is None
    assert (chat["mcp_server_ids"], chat["labels"], chat["files"]) == ([], {}, [])
    history = api.messages(chat["id"])["messages"]
    assert [m["role"] for m in history] == ["user"]
    assert history[0]["content"][0]["text"] == "hi", "text input is trimmed"
    body = {
        "organization_id": api.model.organization_id,
        "content": [{"type": " Text ", "text": "x"}],
    }
    mixed_case = api.request("POST", "", body)
    assert mixed_case.status == 201, "the part type is matched case-insensitively"
    assert api.messages(mixed_case.json()["id"])["messages"][0]["content"][0]["type"] == "text"
    assert history[0]["created_by"] == api.model.user_id


@pytest.mark.parametrize(
    ("body", "status", "message", "detail"),
    [
        ({"organization_id": None}, 400, "organization_id is required.", None),
        (
            {"organization_id": "00000000-0000-4000-8000-000000000000"},
            403,
            "You are not a member of the specified organization.",
            None,
        ),
        (
            {"content": [{"type": "text", "text": "   "}]},
            400,
            "Invalid input part.",
            "content[0].text cannot be empty.",
        ),
        (
            {"content": [{"type": "image", "text": "x"}]},
            400,
            "Invalid input part.",
            'content[0].type "image" is not supported.',
        ),
        (
            {"content": [{"type": "file"}]},
            400,
            "Invalid input part.",
            "content[0].file_id is required for file parts.",
        ),
        (
            {"content": [{"type": "file", "file_id": "00000000-0000-4000-8000-000000000000"}]},
            400,
            "Invalid input part.",
            "content[0] references a file that does not exist.",
        ),
        ({"model_config_id": "nope"}, 400, "Invalid model config ID.", None),
        (
            {"model_config_id": "00000000-0000-4000-8000-000000000000"},
            400,
            "Invalid model_config_id: model config not found or disabled.",
            None,
        ),
        ({"plan_mode": "yolo"}, 400, "Invalid plan_mode value.", None),
        (
            {"mcp_server_ids": ["22222222-2222-4222-8222-222222222222"]},
            400,
            "One or more MCP server IDs are invalid or disabled.",
            "Invalid IDs: 22222222-2222-4222-8222-222222222222",
        ),
        ({"labels": {"a": "v", "-a": "v"}}, 400, "Invalid labels.", None),
        (
            {"unsafe_dynamic_tools": [{"name": ""}]},
            400,
            "Dynamic tool name must not be empty.",
            None,
        ),
        (
            {"unsafe_dynamic_tools": [{"name": "a"}, {"name": "a"}]},
            400,
            "Duplicate dynamic tool name.",
            'Tool "a" appears more than once.',
        ),
        (
            {"unsafe_dynamic_tools": [{"name": f"t{n}"} for n in range(251)]},
            400,
            "Too many dynamic tools.",
            None,
        ),
        ({"client_type": "cli"}, 400, "Invalid client_type.", None),
        (
            {"reasoning_effort": "extreme"},
            400,
            "Invalid reasoning_effort value.",
            'Invalid value "extreme": must be one of none, minimal, low, medium, high, xhigh, max.',
        ),
        (
            {"workspace_id": "11111111-1111-4111-8111-111111111111"},
            400,
            "Workspace not found or you do not have access to this resource",
            None,
        ),
        # Fields of the wrong type fail the body's decoding, before any other check.
        (
            {"workspace_id": "not-a-uuid", "content": []},
            400,
            "Request body must be valid JSON.",
            "invalid UUID length: 10",
        ),
        (
            {"organization_id": "g" * 36},
            400,
            "Request body must be valid JSON.",
            "invalid UUID format",
        ),
        (
            {"organization_id": 7},
            400,
            "Request body must be valid JSON.",
            "organization_id must be a UUID string",
        ),
        (
            {"organization_id": "00000000-0000-0000-0000-000000000000"},
            400,
            "organization_id is required.",
            None,
        ),
        (
            {"mcp_server_ids": ["x"]},
            400,
            "Request body must be valid JSON.",
            "mcp_server_ids must be an array of UUIDs",
        ),
        (
            {"mcp_server_ids": "x"},
            400,
            "Request body must be valid JSON.",
            "mcp_server_ids must be an array of UUIDs",
        ),
        (
            {"labels": {"a": 1}},
            400,
            "Request body must be valid JSON.",
            "labels must be an object of strings",
        ),
    ],
)
def test_create_validation_errors(
    body: dict[str, object], status: int, message: str, detail: str | None
) -> None:
    """Server-behaviour 1.5, checked in its order."""
    api = Api()
    full: dict[str, object] = {
        "organization_id": api.model.organization_id,
        "content": [{"type": "text", "text": "hi"}],
    }
    full.update(body)
    full = {k: v for k, v in full.items() if v is not None}
    response = api.request("POST", "", full)
    assert response.status == status, response.json()
    assert response.json()["message"] == message
    if detail is not None:
        assert response.json()["detail"] == detail
    assert api.model.chats == {}


def test_create_body_over_256_kib_is_413() -> None:
    api = Api()
    big = "x" * (256 * 1024 + 1)
    response = api.request(
        "POST",
        "",
        {"organization_id": api.model.organization_id, "content": [{"type": "text", "text": big}]},
    )
    assert response.status == 413


def test_create_without_any_enabled_model_is_400() -> None:
    api = Api(models=(FakeModelSpec(model="m", display_name="M", enabled=False),))
    response = api.request(
        "POST",
        "",
        {"organization_id": api.model.organization_id, "content": [{"type": "text", "text": "x"}]},
    )
    assert response.status == 400
    assert response.json()["message"] == "No chat model is available in this organization."


def test_create_uses_the_default_model_or_the_requested_one() -> None:
    api = Api()
    default_id = api.model.model_config_ids["claude-sonnet-4-6"]
    gpt_id = api.model.model_config_ids["gpt-5"]
    first = api.create("a")
    second = api.create("b", model_config_id=gpt_id.upper())
    assert api.chat(first)["last_model_config_id"] == default_id
    assert api.chat(second)["last_model_config_id"] == gpt_id


# -- SendMessage in every state (server-behaviour 2.2, 2.5, 8.3) --------------------------------


def test_send_to_waiting_chat_goes_straight_into_history() -> None:
    """W → R0: ``queued: false``, ``message`` is the user message, a new run starts."""
    api = Api()
    chat_id = waiting_chat(api)
    response = api.send(chat_id, "again")
    assert response.status == 200
    body = response.json()
    assert body["queued"] is False
    assert body["message"]["role"] == "user"
    assert [m["id"] for m in body["messages"]] == [body["message"]["id"]]
    assert "queued_message" not in body
    assert api.status(chat_id) == "running"
    api.run_until(chat_id, {"waiting"})


def test_send_to_errored_chat_clears_last_error() -> None:
    """E0 → R0 clears ``last_error`` (server-behaviour 2.2, 8.9)."""
    api = Api()
    chat_id = errored_chat(api)
    assert api.chat(chat_id)["last_error"]["message"] == "boom"
    response = api.send(chat_id, "retry please")
    assert response.json()["queued"] is False
    assert api.status(chat_id) == "running"
    assert "last_error" not in api.chat(chat_id)


def test_send_to_errored_chat_with_queue_promotes_the_head() -> None:
    """E1 → R1: the new message joins the tail, the head is promoted into history."""
    api = Api()
    chat_id = errored_chat(api, queued=True)
    old_head = api.model.chats[chat_id].queue[0]
    response = api.send(chat_id, "newest")
    body = response.json()
    assert body["queued"] is True
    assert "message" not in body
    assert body["queued_message"]["content"][0]["text"] == "newest"
    assert [text_of(m) for m in body["messages"]] == ["queued while running"]
    assert body["messages"][0]["queued_message_id"] == old_head.id
    queue = api.model.chats[chat_id].queue
    assert [q.id for q in queue] == [body["queued_message"]["id"]]
    assert api.status(chat_id) == "running"
    assert "last_error" not in api.chat(chat_id)


def test_send_to_running_chat_queues_by_default() -> None:
    """R0 + queue → R1: 200 with ``queued: true`` and the queue entry; status stays
    ``running`` (server-behaviour 8.3)."""
    api = Api()
    chat_id = running_chat(api)
    for busy in (None, "", "queue"):
        response = api.request(
            "POST",
            f"/{chat_id}/messages",
            {"content": [{"type": "text", "text": "later"}]}
            | ({} if busy is None else {"busy_behavior": busy}),
        )
        body = response.json()
        assert response.status == 200
        assert body["queued"] is True
        assert isinstance(body["queued_message"]["id"], int)
        assert body["queued_message"]["chat_id"] == chat_id
        assert "messages" not in body
    assert api.status(chat_id) == "running"
    assert len(api.model.chats[chat_id].queue) == 3


def test_busy_interrupt_on_running_chat_interrupts_and_promotes() -> None:
    """R + interrupt → I1 with ``queued: true``; after the wind-down the partial answer is
    committed, the head promoted and the chat runs (server-behaviour 8.3)."""
    api = Api(interrupt_delay=0.5)
    chat_id = running_chat(api)
    api.advance(0.1)
    response = api.send(chat_id, "stop and do this", busy="interrupt")
    assert response.json()["queued"] is True
    assert api.status(chat_id) == "interrupting"
    api.advance(0.49)
    assert api.status(chat_id) == "interrupting", "the wind-down takes interrupt_delay"
    api.advance(0.02)
    assert api.status(chat_id) == "running"
    history = api.messages(chat_id)["messages"][::-1]
    assert [m["role"] for m in history] == ["user", "assistant", "user"]
    assert text_of(history[1]) == "partial answer "
    assert text_of(history[2]) == "stop and do this"
    assert api.model.chats[chat_id].queue == []


@pytest.mark.parametrize("busy", ["queue", "interrupt"])
def test_send_to_interrupting_chat_queues_whatever_the_busy_behaviour(busy: str) -> None:
    """I0/I1 → I1."""
    api = Api()
    chat_id = interrupting_chat(api)
    response = api.send(chat_id, "more", busy=busy)
    assert response.json()["queued"] is True
    assert api.status(chat_id) == "interrupting"
    assert len(api.model.chats[chat_id].queue) == 1


def test_send_queue_to_paused_chat_waits_in_the_queue() -> None:
    """A0 + queue → A1: still ``requires_action``; the message waits."""
    api = Api()
    chat_id = paused_chat(api)
    response = api.send(chat_id, "meanwhile")
    assert response.json()["queued"] is True
    assert api.status(chat_id) == "requires_action"
    api.advance(100)
    assert api.status(chat_id) == "requires_action"
    assert len(api.model.chats[chat_id].queue) == 1


def test_busy_interrupt_on_paused_chat_cancels_tool_calls_and_runs() -> None:
    """A + interrupt → cancellation results, message queued, status ``running``; the model
    continues on the cancelled results, then the queue drains (server-behaviour Q7)."""
    api = Api()
    chat_id = paused_chat(api)
    call_id = api.pending_ids(chat_id)[0]
    response = api.send(chat_id, "forget it", busy="interrupt")
    body = response.json()
    assert body["queued"] is True
    assert api.status(chat_id) == "running"
    cancellation = body["messages"][0]
    assert cancellation["role"] == "tool"
    part = cancellation["content"][0]
    assert part["tool_call_id"] == call_id
    assert part["result"] == CANCEL_BY_USER_MESSAGE
    assert part["is_error"] is True
    assert api.pending_ids(chat_id) == []
    api.run_until(chat_id, {"waiting"})
    history = api.messages(chat_id)["messages"][::-1]
    roles = [m["role"] for m in history]
    assert roles[:4] == ["user", "assistant", "tool", "assistant"]
    assert text_of(history[3]) == f'It is "{CANCEL_BY_USER_MESSAGE}".'
    assert text_of(history[4]) == "forget it"


def test_send_errors() -> None:
    api = Api()
    chat_id = waiting_chat(api)
    response = api.request(
        "POST",
        f"/{chat_id}/messages",
        {"content": [{"type": "text", "text": "x"}], "busy_behavior": "now"},
    )
    assert response.status == 400
    assert response.json() == {
        "message": "Invalid busy_behavior value.",
        "detail": 'Must be "queue" or "interrupt".',
    }
    assert api.request("POST", f"/{chat_id}/messages", {"content": []}).status == 400
    assert api.request("POST", f"/{chat_id}/messages", raw=b"{not json").status == 400
    assert api.request("POST", f"/{chat_id}/messages", raw=b"[1]").status == 400
    missing = "00000000-0000-4000-8000-000000000000"
    assert api.send(missing, "x").status == 404
    bad = api.send("not-a-uuid", "x")
    assert bad.status == 400
    assert bad.json()["message"] == 'Invalid UUID "not-a-uuid".'


def test_queue_limit_is_20_then_429() -> None:
    """Server-behaviour 2.5, 8.3: 429 "Message queue is full." with the maximum in detail."""
    api = Api()
    chat_id = running_chat(api)
    for n in range(20):
        assert api.send(chat_id, f"q{n}").status == 200
    response = api.send(chat_id, "one too many")
    assert response.status == 429
    assert response.json() == {
        "message": "Message queue is full.",
        "detail": "Maximum 20 messages can be queued.",
    }


# -- interrupt (server-behaviour 2.2, 8.6, 8.7) ------------------------------------------------------


def test_interrupt_returns_at_once_with_interrupting_then_winds_down_to_waiting() -> None:
    api = Api(interrupt_delay=2.0)
    chat_id = running_chat(api)
    api.advance(0.1)
    response = api.request("POST", f"/{chat_id}/interrupt?wait=true")
    assert response.status == 200
    assert response.json()["status"] == "interrupting", "?wait=true is ignored"
    assert api.status(chat_id) == "interrupting"
    api.advance(1.9)
    assert api.status(chat_id) == "interrupting"
    api.advance(0.2)
    assert api.status(chat_id) == "waiting"
    history = api.messages(chat_id)["messages"]
    assert text_of(history[0]) == "partial answer ", "the partial answer is committed"


def test_interrupt_with_queue_promotes_without_waiting() -> None:
    """I1 → the head is promoted and the status becomes ``running`` directly."""
    api = Api()
    chat_id = interrupting_chat(api, queued=True)
    api.run_until(chat_id, {"running"})
    assert api.model.chats[chat_id].queue == []
    assert text_of(api.messages(chat_id)["messages"][0]) == "next"


def test_interrupt_paused_chat_resumes_it_with_cancellations() -> None:
    """A0 → R0: cancellation results ("Tool execution interrupted by user") and the model
    continues (D4)."""
    api = Api()
    chat_id = paused_chat(api)
    response = api.interrupt(chat_id)
    assert response.status == 200
    assert response.json()["status"] == "running"
    history = api.messages(chat_id)["messages"]
    assert history[0]["role"] == "tool"
    assert history[0]["content"][0]["result"] == CANCEL_BY_USER
    api.run_until(chat_id, {"waiting"})
    assert text_of(api.messages(chat_id)["messages"][0]) == f'It is "{CANCEL_BY_USER}".'


def test_interrupt_paused_chat_with_queue_keeps_the_queue() -> None:
    """A1 → R1; the queue drains once the resumed turn finishes."""
    api = Api()
    chat_id = paused_chat(api)
    api.send(chat_id, "queued")
    api.interrupt(chat_id)
    assert api.status(chat_id) == "running"
    assert len(api.model.chats[chat_id].queue) == 1
    api.run_until(chat_id, {"waiting"})
    assert api.model.chats[chat_id].queue == []


@pytest.mark.parametrize(
    "make",
    [
        waiting_chat,
        errored_chat,
        lambda api: errored_chat(api, queued=True),
        interrupting_chat,
        lambda api: interrupting_chat(api, queued=True),
    ],
    ids=["W", "E0", "E1", "I0", "I1"],
)
def test_interrupt_is_409_in_w_e_and_i(make: object, request: pytest.FixtureRequest) -> None:
    """Server-behaviour 8.6: a second interrupt while ``interrupting`` is a 409 too; the
    detail names the refused transition and the execution state, as the server's does."""
    api = Api()
    chat_id = make(api)  # type: ignore[operator]
    before = api.status(chat_id)
    response = api.interrupt(chat_id)
    assert response.status == 409
    assert response.json() == {
        "message": "Chat is not in an interruptible state.",
        "detail": "chat state transition Interrupt not allowed from state "
        + request.node.callspec.id,
    }
    assert api.status(chat_id) == before


# -- FinishTurn and promotion (server-behaviour 2.2, 2.5, 8.2; D8) ----------------------------------


@pytest.mark.parametrize("stamp", [True, False])
def test_finishing_turn_promotes_the_queue_head_as_a_new_message(stamp: bool) -> None:
    api = Api(stamp_promotions=stamp)
    chat_id = api.create("first", script=Script((Say("one"), Wait(1.0), Say(" two"))))
    queued = api.send(chat_id, "second").json()["queued_message"]
    api.advance(0.05)
    ids_before = [m["id"] for m in api.messages(chat_id)["messages"]]
    seen = []
    while api.model.chats[chat_id].queue:
        api.advance(0.01)
        seen.append(api.status(chat_id))
    assert set(seen) == {"running"}, "no terminal status between the two turns"
    promoted = api.messages(chat_id)["messages"][0]
    assert promoted["role"] == "user"
    assert text_of(promoted) == "second"
    assert promoted["id"] > max(ids_before)
    assert promoted["created_by"] == api.model.user_id
    if stamp:
        assert promoted["queued_message_id"] == queued["id"]
    else:
        assert "queued_message_id" not in promoted


# -- tool results (server-behaviour 5.4, 8.8) --------------------------------------------------------


def test_tool_results_are_409_unless_requires_action() -> None:
    api = Api()
    chat_id = running_chat(api)
    response = api.results(chat_id, [{"tool_call_id": "x", "output": 1}])
    assert response.status == 409
    assert response.json() == {
        "message": "Chat is not waiting for tool results.",
        "detail": 'chat status is "running", expected "requires_action"',
    }


def test_tool_results_exact_set_validation() -> None:
    api = Api()
    chat_id = api.create("two", script=TWO_TOOLS, unsafe_dynamic_tools=[WEATHER_TOOL])
    api.run_until(chat_id, {"requires_action"})
    a, b = api.pending_ids(chat_id)

    def check(results: list[dict[str, object]], message: str, detail: str | None) -> None:
        response = api.results(chat_id, results)
        assert response.status == 400
        assert response.json()["message"] == message
        if detail is not None:
            assert response.json()["detail"] == detail
        assert api.status(chat_id) == "requires_action"

    check([], "At least one tool result is required.", None)
    check(
        [{"tool_call_id": a, "output": 1}, {"tool_call_id": a, "output": 2}],
        "Duplicate tool_call_id in results.",
        f'Duplicate tool call ID "{a}".',
    )
    check(
        [{"tool_call_id": a, "output": 1}],
        "Missing tool result.",
        f'Missing result for tool call "{b}".',
    )
    check(
        [
            {"tool_call_id": a, "output": 1},
            {"tool_call_id": b, "output": 1},
            {"tool_call_id": "zz", "output": 1},
        ],
        "Unexpected tool result.",
        'No pending tool call with ID "zz".',
    )
    check(
        [{"tool_call_id": a}, {"tool_call_id": b, "output": 1}],
        "Tool result output must be valid JSON.",
        None,
    )
    response = api.results(
        chat_id,
        [
            {"tool_call_id": b, "output": {"t": 2}},
            {"tool_call_id": a, "output": None, "is_error": True},
        ],
    )
    assert response.status == 204
    assert response.body == b""
    assert api.status(chat_id) == "running"
    tools = [m for m in api.messages(chat_id)["messages"] if m["role"] == "tool"][::-1]
    assert [t["content"][0]["tool_call_id"] for t in tools] == [a, b], "one tool message per result"
    assert all(t["content"][0]["tool_name"] == "get_weather" for t in tools)
    assert tools[0]["content"][0]["is_error"] is True
    assert tools[0]["content"][0]["result"] is None
    again = api.results(
        chat_id, [{"tool_call_id": a, "output": 1}, {"tool_call_id": b, "output": 1}]
    )
    assert again.status == 409, "a second submit after success is a 409"


def test_tool_results_resume_the_model_with_the_output() -> None:
    api = Api()
    chat_id = paused_chat(api)
    call_id = api.pending_ids(chat_id)[0]
    assert api.results(chat_id, [{"tool_call_id": call_id, "output": {"temp_c": 21}}]).status == 204
    api.run_until(chat_id, {"waiting"})
    assert text_of(api.messages(chat_id)["messages"][0]) == 'It is {"temp_c":21}.'


def test_requires_action_deadline_cancels_and_continues() -> None:
    """CancelRequiresAction after the (scaled) deadline: cancellation results, ``running``,
    then the model goes on (server-behaviour 8.8)."""
    api = Api(requires_action_timeout=3.0)
    chat_id = paused_chat(api)
    api.advance(2.9)
    assert api.status(chat_id) == "requires_action"
    api.advance(0.2)
    assert api.status(chat_id) != "requires_action"
    history = api.messages(chat_id)["messages"][::-1]
    tool = next(m for m in history if m["role"] == "tool")
    assert tool["content"][0]["result"] == CANCEL_BY_TIMEOUT
    api.run_until(chat_id, {"waiting"})
    late = api.results(chat_id, [{"tool_call_id": "x", "output": 1}])
    assert late.status == 409


# -- archive (server-behaviour 2.4, 8.6, 8.10) ------------------------------------------------------


@pytest.mark.parametrize(
    "make", [running_chat, interrupting_chat, paused_chat], ids=["R", "I", "A"]
)
def test_archive_is_409_while_active(make: object, request: pytest.FixtureRequest) -> None:
    api = Api()
    chat_id = make(api)  # type: ignore[operator]
    response = api.archive(chat_id)
    assert response.status == 409
    assert response.json()["message"] == (
        "Cannot archive an active chat. Interrupt or wait for the chat to finish first."
    )
    state = request.node.callspec.id + "0"
    assert response.json()["detail"] == (
        f"chat state transition SetArchived not allowed from state {state}"
    )
    assert api.chat(chat_id)["archived"] is False


@pytest.mark.parametrize(
    "make",
    [waiting_chat, errored_chat, lambda api: errored_chat(api, queued=True)],
    ids=["W", "E0", "E1"],
)
def test_archive_from_idle_states_and_its_rules(make: object) -> None:
    api = Api()
    chat_id = make(api)  # type: ignore[operator]
    had_error = "last_error" in api.chat(chat_id)
    assert api.archive(chat_id).status == 204
    chat = api.chat(chat_id)
    assert chat["archived"] is True
    assert ("last_error" in chat) == had_error, "archiving keeps last_error"
    again = api.archive(chat_id)
    assert again.status == 400
    assert again.json()["message"] == "Chat is already archived."
    refusals = {
        "send": api.send(chat_id, "x"),
        "results": api.results(chat_id, [{"tool_call_id": "a", "output": 1}]),
        "interrupt": api.interrupt(chat_id),
        "promote": api.request("POST", f"/{chat_id}/queue/1/promote"),
        "edit": api.request(
            "PATCH", f"/{chat_id}/messages/1", {"content": [{"type": "text", "text": "x"}]}
        ),
    }
    assert {k: v.status for k, v in refusals.items()} == dict.fromkeys(refusals, 400)
    assert refusals["send"].json()["message"] == "Cannot send messages to an archived chat."
    assert (
        refusals["results"].json()["message"] == "Cannot submit tool results to an archived chat."
    )
    assert refusals["interrupt"].json()["message"] == "Cannot interrupt an archived chat."
    assert api.request("DELETE", f"/{chat_id}/queue/1").status == 409, "no archived pre-check"
    assert api.archive(chat_id, False).status == 204
    assert api.chat(chat_id)["archived"] is False
    not_archived = api.archive(chat_id, False)
    assert not_archived.status == 400
    assert not_archived.json()["message"] == "Chat is already not archived."


def test_archived_chats_are_listed_only_on_request() -> None:
    api = Api()
    a = waiting_chat(api)
    b = waiting_chat(api)
    api.archive(a)
    listed = [c["id"] for c in api.request("GET", "").json()]
    assert listed == [b]
    archived = [c["id"] for c in api.request("GET", "?q=archived:true").json()]
    assert archived == [a]
    assert api.request("GET", "?q=bogus:1").status == 400


@pytest.mark.parametrize(
    ("labels", "details"),
    [
        ({"": "v"}, ["label key must not be empty"]),
        (
            {"k" * 65: "v"},
            [f'label key "{"k" * 65}" exceeds maximum length of 64 bytes'],
        ),
        (
            {"a b": ""},
            [
                'label key "a b" contains invalid characters; must match '
                "^[a-zA-Z0-9][a-zA-Z0-9._/-]*$",
                'label value for key "a b" must not be empty',
            ],
        ),
        ({"k": "é" * 129}, ['label value for key "k" exceeds maximum length of 256 bytes']),
        ({f"k{n}": "v" for n in range(51)}, ["too many labels (51); maximum is 50"]),
        ({"team/a.b_c-1": "v" * 256}, []),
        ({f"k{n}": "v" for n in range(50)}, []),
    ],
)
def test_labels_follow_the_servers_rules(labels: dict[str, str], details: list[str]) -> None:
    """The label rules of the real server's chat label check: each broken rule is one entry
    of ``validations``; on create and on PATCH alike."""
    api = Api()
    body = {"organization_id": api.model.organization_id, "content": text_content("hi")}
    created = api.request("POST", "", {**body, "labels": labels})
    chat_id = waiting_chat(api)
    patched = api.request("PATCH", f"/{chat_id}", {"labels": labels})
    if not details:
        assert created.status == 201 and created.json()["labels"] == labels
        assert patched.status == 204 and api.chat(chat_id)["labels"] == labels
        return
    for response in (created, patched):
        assert response.status == 400
        error = response.json()
        assert error["message"] == "Invalid labels."
        assert error["validations"] == [{"field": "labels", "detail": d} for d in details]


def test_pins_append_move_and_unpin_as_the_server_does() -> None:
    """An unpinned chat goes to the end whatever the value asked; a pinned one moves, clamped,
    its neighbours shifting; 0 unpins. The list shows pinned chats first, in pin order."""
    api = Api()
    a, b, c, d = (waiting_chat(api) for _ in range(4))

    def pins() -> dict[str, int]:
        return {k: api.chat(k)["pin_order"] for k in (a, b, c, d)}

    for chat_id in (a, b, c):
        assert api.request("PATCH", f"/{chat_id}", {"pin_order": 7}).status == 204
    assert pins() == {a: 1, b: 2, c: 3, d: 0}
    api.request("PATCH", f"/{c}", {"pin_order": 1})
    assert pins() == {a: 2, b: 3, c: 1, d: 0}
    api.request("PATCH", f"/{c}", {"pin_order": 99})
    assert pins() == {a: 1, b: 2, c: 3, d: 0}, "clamped to the pinned count"
    api.request("PATCH", f"/{a}", {"pin_order": 0})
    assert pins() == {a: 0, b: 1, c: 2, d: 0}
    listed = [row["id"] for row in api.request("GET", "").json()]
    assert listed[:2] == [b, c], "pinned first, in pin order"
    assert listed[2:] == [d, a], "then newest activity first"


def test_patch_title_pin_labels_and_plan_mode() -> None:
    api = Api()
    chat_id = waiting_chat(api)
    ok = api.request(
        "PATCH",
        f"/{chat_id}",
        {"title": " New ", "pin_order": 2, "labels": {"k": "v"}, "plan_mode": "plan"},
    )
    assert ok.status == 204
    chat = api.chat(chat_id)
    # Pinning an unpinned chat appends it to the pinned list: the first pinned chat is 1,
    # whatever value was asked for.
    assert (chat["title"], chat["pin_order"], chat["labels"], chat["plan_mode"]) == (
        "New",
        1,
        {"k": "v"},
        "plan",
    )
    cases = [
        ({"title": "  "}, "Title cannot be empty."),
        ({"title": "x" * 201}, "Title must be at most 200 characters."),
        ({"pin_order": -1}, "Pin order must be non-negative."),
        ({"pin_order": 1, "archived": True}, "Cannot pin an archived chat."),
        ({"plan_mode": "x"}, "Invalid plan_mode value."),
        ({"labels": ["x"]}, "Request body must be valid JSON."),
        ({"labels": {"k": ""}}, "Invalid labels."),
    ]
    for body, message in cases:
        response = api.request("PATCH", f"/{chat_id}", body)
        assert response.status == 400
        assert response.json()["message"] == message
    assert api.request("GET", "?label=k:v").json()[0]["id"] == chat_id
    assert api.request("GET", "?label=k:w").json() == []
    assert api.request("GET", "?label=bad").status == 400


# -- queue delete and promote (server-behaviour 2.2, 2.5, 8.6) ------------------------------------


def test_queue_delete_windows() -> None:
    api = Api()
    chat_id = running_chat(api)
    empty = api.request("DELETE", f"/{chat_id}/queue/1")
    assert empty.status == 409
    assert empty.json()["message"] == "Chat has no queued messages to delete."
    first = api.send(chat_id, "a").json()["queued_message"]["id"]
    second = api.send(chat_id, "b").json()["queued_message"]["id"]
    missing = api.request("DELETE", f"/{chat_id}/queue/{second + 100}")
    assert missing.status == 404
    assert missing.json()["message"] == "Queued message not found."
    bad = api.request("DELETE", f"/{chat_id}/queue/zero")
    assert bad.status == 400
    assert bad.json() == {
        "message": "Invalid queued message ID.",
        "detail": 'strconv.ParseInt: parsing "zero": invalid syntax',
    }
    huge = api.request("DELETE", f"/{chat_id}/queue/9223372036854775808")
    assert huge.json()["detail"].endswith("value out of range")
    # Any int64 is an id as the server reads the path; zero and negative ones name no entry.
    assert api.request("DELETE", f"/{chat_id}/queue/0").status == 404
    assert api.request("DELETE", f"/{chat_id}/queue/-3").status == 404
    assert api.request("DELETE", f"/{chat_id}/queue/{first}").status == 204
    assert [q.id for q in api.model.chats[chat_id].queue] == [second]


def test_queue_delete_after_promotion_is_404_or_409() -> None:
    """A client must read both as "already materialised" (server-behaviour 2.5)."""
    api = Api()
    chat_id = api.create("x", script=Script((Say("a"), Wait(1.0))))
    first = api.send(chat_id, "a").json()["queued_message"]["id"]
    second = api.send(chat_id, "b").json()["queued_message"]["id"]
    api.model.config.scripts.push(LONG)
    api.model.config.scripts.push(LONG)
    api.advance(1.1)
    assert [q.id for q in api.model.chats[chat_id].queue] == [second]
    assert api.request("DELETE", f"/{chat_id}/queue/{first}").status == 404
    api.run_until(chat_id, {"waiting"})
    assert api.request("DELETE", f"/{chat_id}/queue/{second}").status == 409


def test_promote_windows_and_effects() -> None:
    api = Api(interrupt_delay=0.5)
    chat_id = running_chat(api)
    empty = api.request("POST", f"/{chat_id}/queue/1/promote")
    assert (empty.status, empty.json()["message"]) == (
        409,
        "Chat has no queued messages to promote.",
    )
    first = api.send(chat_id, "a").json()["queued_message"]["id"]
    second = api.send(chat_id, "b").json()["queued_message"]["id"]
    assert api.request("POST", f"/{chat_id}/queue/{second + 9}/promote").status == 404
    assert api.request("POST", f"/{chat_id}/queue/x/promote").status == 400
    assert api.request("POST", f"/{chat_id}/queue/0/promote").status == 404
    api.model.config.scripts.push(LONG)
    response = api.request("POST", f"/{chat_id}/queue/{second}/promote")
    assert response.status == 202
    assert response.json() == {"message": "Queued message promotion accepted."}
    assert api.status(chat_id) == "interrupting", "R1: moved to the head, then interrupt"
    assert [q.id for q in api.model.chats[chat_id].queue] == [second, first]
    api.advance(0.6)
    assert api.status(chat_id) == "running"
    assert text_of(api.messages(chat_id)["messages"][0]) == "b"


def test_promote_in_paused_chat_cancels_and_runs_the_prompt() -> None:
    """A1 → the queued message goes into history at once, after cancellations."""
    api = Api()
    chat_id = paused_chat(api)
    qid = api.send(chat_id, "instead").json()["queued_message"]["id"]
    assert api.request("POST", f"/{chat_id}/queue/{qid}/promote").status == 202
    assert api.status(chat_id) == "running"
    history = api.messages(chat_id)["messages"]
    assert history[1]["content"][0]["result"] == CANCEL_BY_PROMOTION
    assert text_of(history[0]) == "instead"


def test_promote_in_errored_chat_runs_the_prompt() -> None:
    api = Api()
    chat_id = errored_chat(api, queued=True)
    qid = api.model.chats[chat_id].queue[0].id
    assert api.request("POST", f"/{chat_id}/queue/{qid}/promote").status == 202
    assert api.status(chat_id) == "running"
    assert "last_error" not in api.chat(chat_id)


# -- edit (server-behaviour 2.2 EditMessage) ---------------------------------------------------------


def test_edit_replaces_the_message_and_everything_after() -> None:
    api = Api()
    chat_id = waiting_chat(api)
    first_user = api.messages(chat_id)["messages"][-1]
    api.send(chat_id, "second")
    api.run_until(chat_id, {"waiting"})
    chat_id_running = chat_id
    api.send(chat_id_running, "queued?")
    response = api.request(
        "PATCH",
        f"/{chat_id}/messages/{first_user['id']}",
        {"content": [{"type": "text", "text": "edited"}]},
    )
    assert response.status == 200
    body = response.json()
    assert text_of(body["message"]) == "edited"
    assert body["message"]["id"] > first_user["id"]
    assert first_user["id"] in body["deleted_message_ids"]
    visible = api.messages(chat_id)["messages"]
    assert [m["id"] for m in visible] == [body["message"]["id"]]
    assert api.status(chat_id) == "running"
    assert api.model.chats[chat_id].queue == []
    errors = [
        (
            api.request(
                "PATCH", f"/{chat_id}/messages/0", {"content": [{"type": "text", "text": "x"}]}
            ),
            400,
        ),
        (
            api.request(
                "PATCH",
                f"/{chat_id}/messages/{first_user['id']}",
                {"content": [{"type": "text", "text": "x"}]},
            ),
            404,
        ),
    ]
    for resp, status in errors:
        assert resp.status == status
    api.run_until(chat_id, {"waiting"})
    assistant = api.messages(chat_id)["messages"][0]
    not_user = api.request(
        "PATCH",
        f"/{chat_id}/messages/{assistant['id']}",
        {"content": [{"type": "text", "text": "x"}]},
    )
    assert (not_user.status, not_user.json()["message"]) == (
        400,
        "Only user messages can be edited.",
    )


# -- errors and retries (server-behaviour 8.9) -------------------------------------------------------


def test_fail_script_sets_last_error_and_error_status() -> None:
    api = Api()
    chat_id = api.create("x", script=FAIL)
    api.run_until(chat_id, {"error"})
    chat = api.chat(chat_id)
    assert chat["last_error"] == {
        "message": "provider exploded",
        "kind": "overloaded",
        "retryable": True,
    }
    assert api.messages(chat_id)["messages"][0]["role"] == "user", "a failed step commits nothing"


def test_error_with_queue_is_e1_and_keeps_the_queue() -> None:
    api = Api()
    chat_id = errored_chat(api, queued=True)
    assert api.status(chat_id) == "error"
    assert len(api.model.chats[chat_id].queue) == 1


# -- ids (server-behaviour 8.12) -----------------------------------------------------------------


def test_message_ids_are_global_monotonic_and_not_contiguous() -> None:
    api = Api()
    a = api.create("one")
    b = api.create("two")
    api.run_until(a, {"waiting"})
    api.run_until(b, {"waiting"})
    ids_a = [m["id"] for m in api.messages(a)["messages"]][::-1]
    ids_b = [m["id"] for m in api.messages(b)["messages"]][::-1]
    assert ids_a == sorted(ids_a) and ids_b == sorted(ids_b)
    assert not set(ids_a) & set(ids_b)
    every = sorted(ids_a + ids_b)
    assert any(y - x > 1 for x, y in itertools.pairwise(every)), "ids have gaps"


def test_queued_ids_are_their_own_sequence() -> None:
    api = Api(message_id_gaps=False)
    a = running_chat(api)
    b = running_chat(api)
    ids = [api.send(chat, "q").json()["queued_message"]["id"] for chat in (a, b, a)]
    assert ids == [1, 2, 3]


# -- server tools ---------------------------------------------------------------------------------


def test_server_tool_results_are_committed_and_the_model_continues() -> None:
    api = Api()
    script = Script(
        (
            CallServerTool(name="execute", args={"command": "ls"}, result={"output": "a.txt"}),
            CallServerTool(name="web", args={}, result={"hits": 1}, provider_executed=True),
            Say("Found {tool_results}"),
        )
    )
    chat_id = api.create("run", script=script)
    api.run_until(chat_id, {"waiting"})
    history = api.messages(chat_id)["messages"][::-1]
    assert [m["role"] for m in history] == ["user", "assistant", "tool", "assistant"]
    calls = [p for p in history[1]["content"] if p["type"] == "tool-call"]
    assert [c["tool_name"] for c in calls] == ["execute", "web"]
    assert calls[1]["provider_executed"] is True
    inline = [p for p in history[1]["content"] if p["type"] == "tool-result"]
    assert inline[0]["result"] == {"hits": 1}, "provider-executed results stay inline"
    assert history[2]["content"][0]["result"] == {"output": "a.txt"}
    assert text_of(history[3]) == 'Found [{"hits":1},{"output":"a.txt"}]'
    assert history[1]["usage"]["output_tokens"] >= 1
    assert "usage" not in history[2]
