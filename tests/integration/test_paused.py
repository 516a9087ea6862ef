"""A chat ``paused`` at a queued message under edit, on every runtime against the fake over
loopback (D35; server-behaviour 2.6): the turn that ends there completes with ``stop`` and raw
status ``paused``, interrupting returns at once, archiving raises a final typed error at once,
and queued messages are edited and promoted through the client and the agent.
"""

from __future__ import annotations

from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto import CoderAgentError, CoderApiError
from coder_proto.fake import Say, Script, Wait

from .conftest import MakeServer

#: A turn that runs long enough for a prompt to be queued and put under edit behind it.
SLOW = Script((Say("first part "), Wait(1.0), Say("first done")))
#: A turn that runs until it is interrupted.
ENDLESS = Script((Say("partial "), Wait(60.0), Say("never")))


def requests(server: FakeCoderServer, op: str) -> int:
    return int(server.counters.requests[op])


def status(server: FakeCoderServer, chat_id: str | None) -> str | None:
    return None if chat_id is None else server.model.chat(chat_id).status


async def queue_and_begin_edit(rt: Any, client: Any, server: FakeCoderServer, agent: Any) -> int:
    """Once the agent's turn runs on the server, queue a prompt behind it and begin editing
    it; the queue entry's id."""
    await rt.until(lambda: status(server, agent.chat_id) == "running")
    sent = await rt.call(client, "create_chat_message", agent.chat_id, content="queued prompt")
    assert sent.queued and sent.queued_message is not None
    queued_id = int(sent.queued_message.id)
    await rt.call(client, "edit_queued_message", agent.chat_id, queued_id, editing=True)
    return queued_id


def test_d35_a_turn_that_ends_paused_completes_and_the_chat_answers_at_once(
    runtime: Any, make_server: MakeServer
) -> None:
    server = make_server()
    server.config.scripts.add("slow", SLOW)

    async def scenario(rt: Any) -> Any:
        client = await rt.client(server)
        agent = await rt.agent(server, request_timeout=60.0)
        result, queued_id = await rt.concurrently(
            lambda: rt.generate(agent, "slow turn"),
            lambda: queue_and_begin_edit(rt, client, server, agent),
        )
        assert isinstance(queued_id, int), queued_id
        # The run ended with the head under edit: paused, nothing promoted, and the turn
        # finished like one that ends waiting.
        assert status(server, agent.chat_id) == "paused"
        assert (result.finish_reason, result.raw_finish_reason) == ("stop", "paused")
        assert result.settled_by is None and result.text == "first part first done"
        entries = await rt.call(agent, "queued_messages")
        assert [(e.id, e.editing) for e in entries] == [(queued_id, True)]
        assert entries[0].editing_since

        # Nothing runs: interrupting returns the paused chat at once, on the agent and on
        # the raw client.
        interrupted = await rt.interrupt(agent, wait=True)
        assert interrupted.interrupted and interrupted.chat.status == "paused"
        raw = await rt.call(client, "interrupt_chat", agent.chat_id, wait=True)
        assert raw.status == "paused"

        # Archiving is refused for good while paused: one request, a final typed error.
        with pytest.raises(CoderApiError) as refused:
            await rt.archive(agent)
        assert refused.value.status == 409 and refused.value.retryable is False
        assert "under edit" in str(refused.value)
        assert requests(server, "update_chat") == 1
        with pytest.raises(CoderApiError, match="under edit"):
            await rt.call(client, "archive_chat", agent.chat_id)

        # Ending the edit sends the edited prompt.
        await rt.call(
            agent,
            "edit_queued_message",
            queued_id,
            content="the edited prompt",
            editing=False,
        )
        await rt.until(lambda: status(server, agent.chat_id) == "waiting")
        assert await rt.call(agent, "queued_messages") == ()
        history = await rt.history(agent)
        await rt.close(agent)
        await rt.close_client(client)
        return history

    history = runtime.run(scenario)
    users = [p.text for m in history if m.role == "user" for p in m.parts if hasattr(p, "text")]
    assert users == ["slow turn", "the edited prompt"]


def test_d35_interrupt_wait_returns_when_the_interruption_ends_paused(
    runtime: Any, make_server: MakeServer
) -> None:
    server = make_server()
    server.config.scripts.add("endless", ENDLESS)

    async def scenario(rt: Any) -> Any:
        client = await rt.client(server)
        agent = await rt.agent(server, request_timeout=60.0)

        async def interrupt_once_edited() -> Any:
            await queue_and_begin_edit(rt, client, server, agent)
            return await rt.call(client, "interrupt_chat", agent.chat_id, wait=True)

        result, chat = await rt.concurrently(
            lambda: rt.generate(agent, "endless turn"), interrupt_once_edited
        )
        assert chat.status == "paused", chat
        assert (result.finish_reason, result.raw_finish_reason) == ("stop", "paused")
        assert result.text.startswith("partial")
        # A paused chat's queue still takes prompts; promoting the head sends it.
        (entry,) = await rt.call(agent, "queued_messages")
        await rt.call(agent, "promote_queued_message", entry.id)
        await rt.until(lambda: status(server, agent.chat_id) == "waiting")
        await rt.close(agent)
        await rt.close_client(client)

    runtime.run(scenario)


def test_d35_queued_messages_are_edited_and_promoted_through_the_client(
    runtime: Any, make_server: MakeServer
) -> None:
    server = make_server()
    server.config.scripts.add("endless", ENDLESS)

    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        chat = await rt.call(
            client, "create_chat", organization_id=server.organization_id, content="endless"
        )
        await rt.until(lambda: status(server, chat.id) == "running")
        first = (
            await rt.call(client, "create_chat_message", chat.id, content="one")
        ).queued_message
        second = (
            await rt.call(client, "create_chat_message", chat.id, content="two")
        ).queued_message
        assert first is not None and second is not None
        model = next(iter(server.model.model_config_ids.values()))
        await rt.call(
            client,
            "edit_queued_message",
            chat.id,
            first.id,
            content="one, edited",
            model_config_id=model,
            reasoning_effort="high",
        )
        page = await rt.call(client, "get_messages", chat.id)
        head = page.queued_messages[0]
        assert (head.content[0].text, head.model_config_id, head.reasoning_effort) == (
            "one, edited",
            model,
            "high",
        )
        assert not head.editing

        # Refused before any request: nothing to edit, or an override without content.
        before = requests(server, "edit_queued_message")
        with pytest.raises(CoderAgentError, match="needs content, editing"):
            await rt.call(client, "edit_queued_message", chat.id, first.id)
        with pytest.raises(CoderAgentError, match="need content"):
            await rt.call(client, "edit_queued_message", chat.id, first.id, reasoning_effort="high")
        with pytest.raises(CoderAgentError, match="editing must be a bool"):
            await rt.call(client, "edit_queued_message", chat.id, first.id, editing="yes")
        assert requests(server, "edit_queued_message") == before

        # The server's answers: an unknown entry is a 404.
        with pytest.raises(CoderApiError) as missing:
            await rt.call(client, "edit_queued_message", chat.id, second.id + 99, editing=True)
        assert missing.value.status == 404
        assert missing.value.server_message == "Queued message not found."

        # Paused at the head under edit: another entry cannot begin an edit; promoting it
        # sends it while the head keeps its edit.
        await rt.call(client, "edit_queued_message", chat.id, first.id, editing=True)
        paused = await rt.call(client, "interrupt_chat", chat.id, wait=True)
        assert paused.status == "paused"
        with pytest.raises(CoderApiError) as conflict:
            await rt.call(client, "edit_queued_message", chat.id, second.id, editing=True)
        assert conflict.value.status == 409
        await rt.call(client, "promote_queued_message", chat.id, second.id)
        page = await rt.call(client, "get_messages", chat.id)
        assert [q.id for q in page.queued_messages] == [first.id]
        assert page.queued_messages[0].editing
        await rt.until(lambda: status(server, chat.id) == "paused")
        await rt.call(client, "promote_queued_message", chat.id, first.id)
        await rt.until(lambda: status(server, chat.id) == "waiting")
        with pytest.raises(CoderApiError) as empty:
            await rt.call(client, "promote_queued_message", chat.id, first.id)
        assert empty.value.status == 409
        await rt.call(client, "archive_chat", chat.id)
        await rt.close_client(client)

    runtime.run(scenario)
