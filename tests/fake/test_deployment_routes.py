"""``GET /api/v2/users/me`` and ``GET /api/v2/buildinfo``, answered as a Coder deployment answers
them: clients with no organization id find the organization in ``organization_ids`` (D33)."""

from __future__ import annotations

import uuid

import httpx
import pytest

from coder_integrations.fake_server import FakeCoderServer
from coder_proto.fake import FakeCoderModel, FakeConfig

from .support import Api

ME = "/api/v2/users/me"
BUILDINFO = "/api/v2/buildinfo"

USER_KEYS = {
    "id",
    "username",
    "avatar_url",
    "name",
    "email",
    "created_at",
    "updated_at",
    "last_seen_at",
    "status",
    "login_type",
    "theme_preference",
    "organization_ids",
    "roles",
}
BUILDINFO_KEYS = {
    "external_url",
    "version",
    "dashboard_url",
    "telemetry",
    "workspace_proxy",
    "agent_api_version",
    "provisioner_api_version",
    "upgrade_message",
    "deployment_id",
}


def test_users_me_names_the_organization_and_the_user() -> None:
    api = Api(username="ada")
    response = api.request("GET", ME, absolute=True)
    assert response.status == 200
    user = response.json()
    assert set(user) == USER_KEYS
    assert user["organization_ids"] == [api.model.organization_id]
    assert user["id"] == api.model.user_id
    assert user["username"] == "ada"
    assert user["status"] == "active"
    assert isinstance(user["roles"], list)
    # The chats it creates are this user's.
    chat_id = api.create("hi")
    assert api.chat(chat_id)["owner_id"] == user["id"]


def test_the_user_is_found_by_id_and_name_too() -> None:
    api = Api(username="ada")
    me = api.request("GET", ME, absolute=True).json()
    for ident in (me["id"], me["id"].upper(), "ada", "ADA"):
        assert api.request("GET", f"/api/v2/users/{ident}", absolute=True).json() == me
    other = api.request("GET", f"/api/v2/users/{uuid.uuid4()}", absolute=True)
    assert other.status == 404
    assert api.request("GET", "/api/v2/users/grace", absolute=True).status == 404
    assert api.request("POST", ME, absolute=True).status == 405


def test_users_me_needs_the_session_token() -> None:
    api = Api()
    for headers in ({}, {"Coder-Session-Token": "wrong"}):
        model = api.model
        response = model.handle_http("GET", ME, headers, b"", now=0.0)
        assert response.status == 401


def test_buildinfo_needs_no_session() -> None:
    model = FakeCoderModel(FakeConfig(access_url="http://fake.test", build_version="v2.99.0"))
    response = model.handle_http("GET", BUILDINFO, {}, b"", now=0.0)
    assert response.status == 200
    info = response.json()
    assert set(info) == BUILDINFO_KEYS
    assert info["version"] == "v2.99.0"
    assert info["dashboard_url"] == "http://fake.test"
    uuid.UUID(info["deployment_id"])
    again = FakeCoderModel(FakeConfig()).handle_http("GET", BUILDINFO, {}, b"", now=0.0)
    assert again.json()["deployment_id"] == info["deployment_id"], "stable for a seed"


@pytest.mark.parametrize("legacy_only", [False, True])
def test_every_profile_serves_the_deployment_routes(legacy_only: bool) -> None:
    api = Api(legacy_only=legacy_only)
    assert api.request("GET", ME, absolute=True).status == 200
    assert api.request("GET", BUILDINFO, absolute=True).status == 200


def test_the_deployment_routes_stay_up_when_agents_are_disabled() -> None:
    api = Api()
    api.model.faults.chatd_disabled = True
    assert api.request("GET", ME, absolute=True).status == 200
    assert api.request("POST", "", {"organization_id": "x", "content": []}).status == 503


def test_faults_can_target_the_deployment_routes() -> None:
    api = Api()
    api.model.faults.fail_requests("get_user", 500)
    assert api.request("GET", ME, absolute=True).status == 500
    assert api.request("GET", ME, absolute=True).status == 200


def test_served_over_loopback() -> None:
    with FakeCoderServer(chunk_delay=0) as server:
        with httpx.Client(base_url=server.url) as http:
            info = http.get(BUILDINFO).json()
            assert info["dashboard_url"] == server.url
            me = http.get(ME, headers={"Coder-Session-Token": server.token})
            assert me.status_code == 200
            assert me.json()["organization_ids"] == [server.organization_id]
            assert http.get(ME).status_code == 401
        assert server.counters.requests["get_user"] == 2
