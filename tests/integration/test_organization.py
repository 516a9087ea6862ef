"""The organization by default (D33), on every runtime against the fake server over loopback:
with no organization id from the caller or the environment, the client asks
``GET /api/v2/users/me`` once and creates chats (uploads files, lists models) in the user's
first organization; ``CODER_ORG_ID`` is read as well as ``CODER_ORGANIZATION_ID``; a user with
no organization gets a ``CoderAgentError`` saying what to pass."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_io_asyncio import Attachment
from coder_proto import CoderAgentError, CoderApiError
from coder_proto.fake import _deployment
from coder_proto.transcript._recorder import TranscriptRecorder

from .test_recording import check_replay

ORG_VARIABLES = ("CODER_ORGANIZATION_ID", "CODER_ORG_ID")
#: The fake's name for ``GET /api/v2/users/{user}``.
USERS_ME = "get_user"
OTHER_ORG = "11111111-2222-4333-8444-555555555555"


def asked(server: FakeCoderServer, op: str = USERS_ME) -> int:
    return int(server.counters.requests[op])


@pytest.fixture(autouse=True)
def _no_organization_in_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ORG_VARIABLES:
        monkeypatch.delenv(name, raising=False)


@pytest.fixture
def no_organization(monkeypatch: pytest.MonkeyPatch) -> None:
    """The fake's user belongs to no organization (``organization_ids`` empty)."""
    answer = _deployment.Deployment.user_json

    def user_json(self: Any, user: str, now: float) -> dict[str, Any]:
        return {**answer(self, user, now), "organization_ids": []}

    monkeypatch.setattr(_deployment.Deployment, "user_json", user_json)


def test_d33_an_agent_without_an_organization_creates_its_chat_in_the_users_first(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        agent = await rt.agent(server, organization_id=None)
        try:
            # The upload the prompt carries comes first: it asks, and the chat reuses it.
            csv = Attachment(content=b"a,b\n1,2", filename="data.csv")
            result = await rt.generate(agent, ["hello", csv])
            assert result.text
            chat = await rt.client_call(agent, "get_chat", agent.chat_id)
            assert chat.organization_id == server.organization_id
            # Later chats of the same agent reuse the answer.
            await rt.reset_session(agent)
            await rt.generate(agent, "again")
            assert asked(server, "create_chat") == 2
            assert asked(server, "upload_chat_file") == 1
        finally:
            await rt.close(agent)

    runtime.run(scenario)
    assert asked(server) == 1


def test_d33_users_me_is_asked_once_per_client_not_per_agent_or_chat(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        agents = [
            await rt.agent(server, client=client, base_url=None, token=None, organization_id=None)
            for _ in range(3)
        ]
        try:
            for agent in agents:
                await rt.generate(agent, "hi")
            chats = {agent.chat_id for agent in agents}
            assert len(chats) == 3
            for chat_id in chats:
                chat = await rt.call(client, "get_chat", chat_id)
                assert chat.organization_id == server.organization_id
            # The raw client's own calls without an organization use the same answer.
            raw = await rt.call(client, "create_chat", content="raw")
            assert raw.organization_id == server.organization_id
            models = await rt.call(client, "list_model_configs")
            assert models and all(m.organization_id == server.organization_id for m in models)
        finally:
            for agent in agents:
                await rt.close(agent)
            await rt.close_client(client)

    runtime.run(scenario)
    assert asked(server) == 1
    assert asked(server, "create_chat") == 4


def test_d33_agents_starting_together_on_one_client_ask_once(
    runtime: Any, server: FakeCoderServer
) -> None:
    """While the first question is out, the other agents' turns wait for its answer."""
    server.faults.delay_requests(USERS_ME, 0.3)

    async def scenario(rt: Any) -> None:
        client = await rt.client(server)
        agents = [
            await rt.agent(server, client=client, base_url=None, token=None, organization_id=None)
            for _ in range(3)
        ]
        try:
            results = await rt.concurrently(*(lambda a=a: rt.generate(a, "hi") for a in agents))
            assert not [r for r in results if isinstance(r, BaseException)], results
            assert len({r.chat_id for r in results}) == 3
        finally:
            for agent in agents:
                await rt.close(agent)
            await rt.close_client(client)

    runtime.run(scenario)
    assert asked(server) == 1
    assert asked(server, "create_chat") == 3


def test_d33_when_the_first_question_fails_a_waiting_agent_asks_again(
    runtime: Any, server: FakeCoderServer
) -> None:
    server.faults.delay_requests(USERS_ME, 0.2, times=1)
    server.faults.fail_requests(USERS_ME, 503, times=1)

    async def scenario(rt: Any) -> list[Any]:
        client = await rt.client(server)
        agents = [
            await rt.agent(server, client=client, base_url=None, token=None, organization_id=None)
            for _ in range(3)
        ]
        try:
            return list(await rt.concurrently(*(lambda a=a: rt.generate(a, "hi") for a in agents)))
        finally:
            for agent in agents:
                await rt.close(agent)
            await rt.close_client(client)

    results = runtime.run(scenario)
    failed = [r for r in results if isinstance(r, BaseException)]
    assert len(failed) == 1
    assert isinstance(failed[0], CoderApiError) and failed[0].status == 503
    assert failed[0].path == "/api/v2/users/me"
    assert asked(server) == 2
    assert asked(server, "create_chat") == 2


def test_d33_uploads_and_model_listing_of_an_agent_use_the_default_organization(
    runtime: Any, server: FakeCoderServer, tmp_path: Path
) -> None:
    notes = tmp_path / "notes.txt"
    notes.write_bytes(b"notes from a file")

    async def scenario(rt: Any) -> None:
        agent = await rt.agent(server, organization_id=None)
        try:
            models = await rt.list_models(agent)
            assert models and {m.organization_id for m in models} == {server.organization_id}
            attached = await rt.attach(agent, b"notes", media_type="text/plain")
            from_file = await rt.attach(agent, notes)
            assert attached.file_id and from_file.file_id
            result = await rt.generate(agent, ["read this", attached, from_file])
            assert result.text
        finally:
            await rt.close(agent)

    runtime.run(scenario)
    assert asked(server) == 1
    assert asked(server, "upload_chat_file") == 2


@pytest.mark.parametrize("variable", ORG_VARIABLES)
def test_d33_either_environment_variable_names_the_organization(
    runtime: Any,
    server: FakeCoderServer,
    monkeypatch: pytest.MonkeyPatch,
    variable: str,
) -> None:
    monkeypatch.setenv(variable, server.organization_id)

    async def scenario(rt: Any) -> None:
        agent = await rt.agent(server, organization_id=None)
        client = await rt.client(server)
        try:
            await rt.generate(agent, "hi")
            assert agent._core.organization_id == server.organization_id
            raw = await rt.call(client, "create_chat", content="raw")
            assert raw.organization_id == server.organization_id
        finally:
            await rt.close(agent)
            await rt.close_client(client)

    runtime.run(scenario)
    assert asked(server) == 0


def test_d33_coder_organization_id_wins_over_coder_org_id(
    runtime: Any, server: FakeCoderServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CODER_ORGANIZATION_ID", server.organization_id)
    monkeypatch.setenv("CODER_ORG_ID", OTHER_ORG)

    async def scenario(rt: Any) -> None:
        agent = await rt.agent(server, organization_id=None)
        try:
            await rt.generate(agent, "hi")
            chat = await rt.client_call(agent, "get_chat", agent.chat_id)
            assert chat.organization_id == server.organization_id
        finally:
            await rt.close(agent)

    runtime.run(scenario)
    assert asked(server) == 0


def test_d33_an_explicit_organization_is_used_without_asking(
    runtime: Any, server: FakeCoderServer
) -> None:
    async def scenario(rt: Any) -> None:
        agent = await rt.agent(server)
        try:
            await rt.generate(agent, "hi")
        finally:
            await rt.close(agent)

    runtime.run(scenario)
    assert asked(server) == 0


def test_d33_a_user_without_an_organization_gets_an_error_naming_what_to_pass(
    runtime: Any, server: FakeCoderServer, no_organization: None
) -> None:
    async def scenario(rt: Any) -> None:
        agent = await rt.agent(server, organization_id=None)
        client = await rt.client(server)
        try:
            with pytest.raises(CoderAgentError) as raised:
                await rt.generate(agent, "hi")
            message = str(raised.value)
            assert "no organization" in message
            assert "organization_id" in message and "CODER_ORGANIZATION_ID" in message
            assert agent.chat_id is None
            with pytest.raises(CoderAgentError, match="no organization"):
                await rt.call(client, "create_chat", content="raw")
        finally:
            await rt.close(agent)
            await rt.close_client(client)

    runtime.run(scenario)
    assert asked(server, "create_chat") == 0


def test_d33_a_recording_with_the_lookup_replays_to_the_live_outcome(
    runtime: Any, server: FakeCoderServer
) -> None:
    lines: list[str] = []

    async def scenario(rt: Any) -> list[Any]:
        agent = await rt.agent(
            server, organization_id=None, recorder=TranscriptRecorder(lines.append)
        )
        try:
            return [await rt.generate(agent, "hello")]
        finally:
            await rt.close(agent)

    live = runtime.run(scenario)
    assert asked(server) == 1
    check_replay("".join(lines), server.token, live)
