"""The organization by default in the pure core (D33): the ``users/me`` request and how its
answer is read, the environment variables and the order they are read in. The same rules on a
live client, every runtime: ``tests/integration/test_organization.py``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from coder_proto import CoderAgentError, CoderApiError, CoderProtocolError
from coder_proto._jobs.operations import ModelConfigsJob
from coder_proto._jobs.organization import LOOKUP_POLL, LOOKUP_WAIT, organization_from_env
from coder_proto._rest.http import HttpResponse
from coder_proto._rest.prefix import PrefixSelector
from coder_proto._rest.routes import build_get_current_user, parse_default_organization

ORG_A = "aaaaaaaa-0000-4000-8000-000000000001"
ORG_B = "bbbbbbbb-0000-4000-8000-000000000002"


def answer(body: Any, status: int = 200) -> HttpResponse:
    return HttpResponse(status=status, body=json.dumps(body).encode())


def test_d33_the_request_is_users_me_outside_the_chat_routes() -> None:
    request = build_get_current_user()
    assert (request.method, request.path, request.op) == (
        "GET",
        "/api/v2/users/me",
        "get_current_user",
    )
    # Not a chat route: sent as is whatever prefix the client locked (wire 1.3).
    assert PrefixSelector("/api/experimental/chats").begin(request).request.path == request.path


def test_d33_the_first_organization_of_the_user_is_taken() -> None:
    request = build_get_current_user()
    body = {"id": "u1", "username": "ada", "organization_ids": [ORG_A, ORG_B]}
    assert parse_default_organization(request, answer(body)) == ORG_A


@pytest.mark.parametrize("ids", [[], None, "absent"])
def test_d33_a_user_with_no_organization_is_told_what_to_pass(ids: Any) -> None:
    body: dict[str, Any] = {"id": "u1", "username": "ada"}
    if ids != "absent":
        body["organization_ids"] = ids
    with pytest.raises(CoderAgentError) as raised:
        parse_default_organization(build_get_current_user(), answer(body))
    assert type(raised.value) is CoderAgentError
    message = str(raised.value)
    assert "no organization" in message
    assert "organization_id" in message and "CODER_ORGANIZATION_ID" in message
    assert "CODER_ORG_ID" in message


@pytest.mark.parametrize(
    "body",
    [[ORG_A], {"organization_ids": ORG_A}, {"organization_ids": [3]}, {"organization_ids": [" "]}],
)
def test_d33_an_answer_of_another_shape_is_a_protocol_error(body: Any) -> None:
    with pytest.raises(CoderProtocolError, match="/api/v2/users/me"):
        parse_default_organization(build_get_current_user(), answer(body))


def test_d33_a_refused_request_raises_the_servers_error() -> None:
    with pytest.raises(CoderApiError) as raised:
        parse_default_organization(
            build_get_current_user(), answer({"message": "Unauthorized"}, status=401)
        )
    assert raised.value.status == 401 and raised.value.path == "/api/v2/users/me"


@pytest.mark.parametrize(
    ("env", "expected"),
    [
        ({}, None),
        ({"CODER_ORGANIZATION_ID": ORG_A}, ORG_A),
        ({"CODER_ORG_ID": ORG_B}, ORG_B),
        ({"CODER_ORGANIZATION_ID": ORG_A, "CODER_ORG_ID": ORG_B}, ORG_A),
        ({"CODER_ORGANIZATION_ID": " ", "CODER_ORG_ID": ORG_B}, ORG_B),
        ({"CODER_ORGANIZATION_ID": "", "CODER_ORG_ID": " "}, None),
    ],
)
def test_d33_the_environment_is_read_in_order(env: dict[str, str], expected: str | None) -> None:
    assert organization_from_env(env) == expected
    assert organization_from_env(None) is None


ME_BODY = {"id": "u1", "username": "ada", "organization_ids": [ORG_A]}
MODELS = {"models": []}


def sent(machine: Any) -> list[Any]:
    return [a for a in machine.actions() if type(a).__name__ == "SendRequest"]


def test_d33_one_client_asks_once_and_a_second_call_waits_for_the_answer() -> None:
    selector = PrefixSelector()
    first = ModelConfigsJob(selector, None, now=0.0)
    (ask,) = sent(first)
    assert ask.request.path == "/api/v2/users/me" and selector.organization_lookups == 1
    second = ModelConfigsJob(selector, None, now=0.0)
    assert sent(second) == [] and second.next_deadline() == LOOKUP_POLL
    first.response_received(ask.request_id, answer(ME_BODY), now=0.01)
    assert selector.default_organization_id == ORG_A and selector.organization_lookups == 0
    (listing,) = sent(first)
    assert ORG_A in listing.request.path
    second.tick(now=LOOKUP_POLL)
    (listing,) = sent(second)
    assert ORG_A in listing.request.path
    # Known now: a later call sends the listing at once.
    (listing,) = sent(ModelConfigsJob(selector, None, now=1.0))
    assert ORG_A in listing.request.path


def test_d33_a_cancelled_question_lets_the_waiting_call_ask() -> None:
    selector = PrefixSelector()
    first = ModelConfigsJob(selector, None, now=0.0)
    assert len(sent(first)) == 1
    second = ModelConfigsJob(selector, None, now=0.0)
    first.cancel(now=0.01)
    assert first.cancelled and selector.organization_lookups == 0
    second.tick(now=LOOKUP_POLL)
    (ask,) = sent(second)
    assert ask.request.path == "/api/v2/users/me"


def test_d33_a_call_waits_for_another_at_most_lookup_wait() -> None:
    selector = PrefixSelector()
    selector.organization_lookups = 1  # a question that never ends
    waiting = ModelConfigsJob(selector, None, now=0.0)
    now = 0.0
    while not (asks := sent(waiting)):
        now = waiting.next_deadline() or now
        waiting.tick(now=now)
    assert LOOKUP_WAIT <= now < LOOKUP_WAIT + 1
    assert asks[0].request.path == "/api/v2/users/me"
