"""The chat routes beside the turn loop (wire 2.4) on every runtime against the fake server
over loopback: message edit, compact and clear, reconcile, prompts, title proposal, diff,
pins / labels / plan mode through ``update_chat``, by-workspace and signed download URLs,
on the raw client and on the agent, with the server's error statuses and messages."""

from __future__ import annotations

import time
from typing import Any

import httpx
import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto import (
    CoderAgentError,
    CoderApiError,
    TextInput,
    ToolMessage,
    ToolResultContent,
)

from .test_client import UNKNOWN, wait_status


async def _settled_chat(rt: Any, client: Any, server: FakeCoderServer, text: str = "hi") -> Any:
    chat = await rt.call(
        client, "create_chat", organization_id=server.organization_id, content=text
    )
    await wait_status(rt, client, chat.id, {"waiting"})
    return chat


async def _api_error(rt: Any, client: Any, name: str, *args: Any, **kwargs: Any) -> CoderApiError:
    with pytest.raises(CoderApiError) as info:
        await rt.call(client, name, *args, **kwargs)
    return info.value


def test_edit_replaces_a_user_message_and_the_chat_runs_again(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        chat = await _settled_chat(rt, client, server, "first prompt")
        page = await rt.call(client, "get_messages", chat.id)
        user = next(m for m in page.messages if m.role == "user")
        answer = next(m for m in page.messages if m.role == "assistant")
        edited = await rt.call(client, "edit_chat_message", chat.id, user.id, "second prompt")
        assert edited.message.role == "user" and edited.message.id > answer.id
        assert set(edited.deleted_message_ids) >= {user.id, answer.id}
        await wait_status(rt, client, chat.id, {"waiting"})
        prompts = await rt.call(client, "get_chat_prompts", chat.id)
        assert [p.text for p in prompts] == ["second prompt"]
        error = await _api_error(
            rt, client, "edit_chat_message", chat.id, edited.message.id + 1, [TextInput("x")]
        )
        assert error.status in (400, 404)
        missing = await _api_error(rt, client, "edit_chat_message", chat.id, 999_999, "x")
        assert (missing.status, missing.server_message) == (404, "Chat message not found.")
        unknown = await _api_error(rt, client, "edit_chat_message", UNKNOWN, 1, "x")
        assert unknown.status == 404 and unknown.chat_id == UNKNOWN
        with pytest.raises(CoderAgentError, match="message_id"):
            await rt.call(client, "edit_chat_message", chat.id, 0, "x")
        await rt.close_client(client)

    runtime.run(scenario)


def test_compact_then_clear_follow_the_servers_state_rules(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        chat = await _settled_chat(rt, client, server)
        compacted = await rt.call(client, "compact_chat", chat.id)
        assert compacted.id == chat.id and compacted.status == "running"
        await wait_status(rt, client, chat.id, {"waiting"})
        again = await _api_error(rt, client, "compact_chat", chat.id)
        assert (again.status, again.server_message) == (409, "Nothing to compact.")
        cleared = await rt.call(client, "clear_chat", chat.id)
        assert cleared.status == "waiting"
        page = await rt.call(client, "get_messages", chat.id)
        assert any(m.role == "assistant" for m in page.messages)  # the transcript stays
        invalid = await _api_error(rt, client, "reconcile_chat", chat.id)
        assert (invalid.status, invalid.server_message) == (409, "Chat is not in an invalid state.")
        refreshed = await rt.call(client, "refresh_chat_context", chat.id)
        assert refreshed.id == chat.id
        for name in ("compact_chat", "clear_chat", "reconcile_chat", "refresh_chat_context"):
            assert (await _api_error(rt, client, name, UNKNOWN)).status == 404
        assert await rt.call(client, "archive_chat", chat.id) == "archived"
        archived = await _api_error(rt, client, "compact_chat", chat.id)
        assert (archived.status, archived.server_message) == (
            400,
            "Cannot compact an archived chat.",
        )
        await rt.close_client(client)

    runtime.run(scenario)


def test_pins_labels_and_plan_mode_persist_and_labels_filter_the_list(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        chat = await _settled_chat(rt, client, server)
        other = await _settled_chat(rt, client, server, "other")
        await rt.call(
            client, "update_chat", chat.id, pin_order=1, labels={"team": "a"}, plan_mode="plan"
        )
        read = await rt.call(client, "get_chat", chat.id)
        assert (read.pin_order, read.labels, read.plan_mode) == (1, {"team": "a"}, "plan")
        assert read.children == ()
        listed = await rt.call(client, "list_chats", labels={"team": "a"})
        assert [c.id for c in listed] == [chat.id]
        assert other.id not in [c.id for c in listed]
        await rt.call(client, "update_chat", chat.id, pin_order=0, labels={}, plan_mode="")
        read = await rt.call(client, "get_chat", chat.id)
        assert (read.pin_order, read.labels, read.plan_mode) == (0, {}, None)
        bad = await _api_error(rt, client, "update_chat", chat.id, plan_mode="bogus")
        assert (bad.status, bad.server_message) == (400, "Invalid plan_mode value.")
        with pytest.raises(CoderAgentError, match="pin_order"):
            await rt.call(client, "update_chat", chat.id, pin_order=-1)
        await rt.close_client(client)

    runtime.run(scenario)


def test_title_proposal_diff_and_by_workspace(runtime: Any, server: FakeCoderServer) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        chat = await _settled_chat(rt, client, server, "Ship the release\nsoon")
        assert await rt.call(client, "propose_chat_title", chat.id) == "Ship the release"
        diff = await rt.call(client, "get_chat_diff", chat.id)
        assert (diff.chat_id, diff.diff) == (chat.id, "")
        assert await rt.call(client, "get_chats_by_workspace", [UNKNOWN]) == {}
        assert await rt.call(client, "get_chats_by_workspace", []) == {}
        bad = await _api_error(rt, client, "get_chats_by_workspace", ["nope"])
        assert bad.status == 400 and bad.chat_id is None
        for name in ("propose_chat_title", "get_chat_diff", "get_chat_prompts"):
            assert (await _api_error(rt, client, name, UNKNOWN)).status == 404
        with pytest.raises(CoderAgentError, match="at most 25"):
            await rt.call(client, "get_chats_by_workspace", [UNKNOWN] * 26)
        await rt.close_client(client)

    runtime.run(scenario)


def test_a_signed_download_url_fetches_the_file_without_the_session_token(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        file_id = await rt.call(
            client,
            "upload_chat_file",
            server.organization_id,
            b"signed bytes",
            media_type="text/plain",
            filename="notes.txt",
        )
        signed = await rt.call(client, "get_chat_file_download_url", file_id)
        assert (signed.size_bytes, signed.name, signed.mime_type) == (
            12,
            "notes.txt",
            "text/plain",
        )
        missing = await _api_error(rt, client, "get_chat_file_download_url", UNKNOWN)
        assert missing.status == 404
        await rt.close_client(client)
        return signed

    signed = runtime.run(scenario)
    with httpx.Client(base_url=server.url) as http:
        got = http.get(signed.url)
        assert (got.status_code, got.content) == (200, b"signed bytes")
        assert got.headers["cache-control"] == "no-store"
        assert http.get(signed.url + "x").status_code == 404


def test_the_agent_compacts_clears_edits_and_reads_its_chat(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        agent = await rt.agent(server)
        await rt.generate(agent, "Tell me a story")
        prompts = await rt.call(agent, "prompts")
        assert [p.text for p in prompts] == ["Tell me a story"]
        assert await rt.call(agent, "propose_title") == "Tell me a story"
        assert (await rt.call(agent, "diff")).diff == ""
        compacted = await rt.call(agent, "compact")
        assert compacted.status == "running"
        await wait_status(rt, agent.client, agent.chat_id, {"waiting"})
        assert (await rt.call(agent, "clear")).status == "waiting"
        edited = await rt.call(agent, "edit_message", prompts[0].id, "Tell me a poem")
        assert prompts[0].id in edited.deleted_message_ids
        await wait_status(rt, agent.client, agent.chat_id, {"waiting"})
        assert [p.text for p in await rt.call(agent, "prompts", limit=1)] == ["Tell me a poem"]
        after = await rt.generate(agent, "And a limerick")
        assert after.text
        prompts = await rt.call(agent, "prompts")
        assert [p.text for p in prompts] == ["And a limerick", "Tell me a poem"]
        await rt.close(agent)

    runtime.run(scenario)


def test_a_root_chat_lists_its_sub_agent_chats_in_children(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        root = await _settled_chat(rt, client, server, "lead")
        child = server.model.spawn_child(root.id, "explore the repository", time.monotonic())
        await wait_status(rt, client, child.id, {"waiting"})
        read = await rt.call(client, "get_chat", root.id)
        assert [c.id for c in read.children] == [child.id]
        assert read.children[0].parent_chat_id == root.id
        assert [c.id for c in await rt.call(client, "list_chats")] == [root.id]
        own = await rt.call(client, "get_chat", child.id)
        assert own.children == () and own.root_chat_id == root.id
        total = await rt.call(client, "get_chat_cost", root.id)
        assert (await rt.call(client, "get_chat_cost", child.id)).request_count == (
            total.request_count
        )
        await rt.close_client(client)

    runtime.run(scenario)


def test_the_read_marker_moves_with_update_chat_and_shows_as_has_unread(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        # No stream was opened: the answer lies past the owner's read marker.
        chat = await _settled_chat(rt, client, server)
        assert (await rt.call(client, "get_chat", chat.id)).has_unread is True
        await rt.call(client, "update_chat", chat.id, read=True)
        assert (await rt.call(client, "get_chat", chat.id)).has_unread is False
        listed = await rt.call(client, "list_chats")
        assert [c.has_unread for c in listed if c.id == chat.id] == [False]
        await rt.call(client, "update_chat", chat.id, read=False)
        assert (await rt.call(client, "get_chat", chat.id)).has_unread is True
        with pytest.raises(CoderAgentError, match="read must be a bool"):
            await rt.call(client, "update_chat", chat.id, read="yes")
        await rt.close_client(client)

    runtime.run(scenario)


def test_a_streamed_edit_replaces_the_prompt_and_streams_the_rerun(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        agent = await rt.agent(server)
        early = await rt.stream(agent, "Tell me a story", edit_message_id=1)
        assert isinstance(early.error, CoderAgentError)
        assert str(early.error) == "cannot edit a message before the session has a chat"
        assert server.model.chats == {}
        first = await rt.stream(agent, "Tell me a story")
        assert first.text == "You said: Tell me a story"
        [prompt] = await rt.call(agent, "prompts")
        edited = await rt.stream(agent, "Tell me a poem", edit_message_id=prompt.id)
        assert edited.error is None
        assert edited.text == "You said: Tell me a poem"
        assert edited.result.finish_reason == "stop"
        # The history holds the replacement and its answer, not the story.
        history = await rt.call(agent, "history")
        assert [(m.role, _text_of(m)) for m in history] == [
            ("user", "Tell me a poem"),
            ("assistant", "You said: Tell me a poem"),
        ]
        # The next turn follows the edited history as usual.
        after = await rt.stream(agent, "And a limerick")
        assert after.text == "You said: And a limerick"
        gone = await rt.stream(agent, "again", edit_message_id=prompt.id)
        assert isinstance(gone.error, CoderApiError) and gone.error.status == 404
        # An edit replaces a user message: tool results or a bad id are refused up front.
        results = ToolMessage((ToolResultContent(tool_call_id="call-1", output=1),))
        refused = await rt.stream(agent, messages=[results], edit_message_id=prompt.id)
        assert str(refused.error) == (
            "an edit replaces a user message: its prompt must end with one"
        )
        zero = await rt.stream(agent, "again", edit_message_id=0)
        assert str(zero.error) == "edit_message_id must be a positive integer, got 0"
        await rt.close(agent)

    runtime.run(scenario)


def _text_of(message: Any) -> str:
    return "".join(p["text"] for p in message.to_json()["parts"] if p["type"] == "text")
