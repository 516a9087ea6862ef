"""Units of the OpenTelemetry layer: route templates and the failure class of a REST call
that got no response."""

from __future__ import annotations

from coder_integrations.otel import _failure_type, route_template


def test_failure_types_of_rest_calls_without_a_response() -> None:
    assert _failure_type("ConnectError: [Errno 111] Connection refused") == "ConnectError"
    assert _failure_type("request cancelled") == "cancelled"
    assert _failure_type("something odd happened") == "_OTHER"


def test_route_templates_name_no_item() -> None:
    assert route_template("/api/v2/chats") == "/api/v2/chats"
    chat = "b4862b21-fb97-4435-8856-1712e8e5216a"
    assert route_template(f"/api/experimental/chats/{chat}/messages?after_id=3") == (
        "/api/experimental/chats/{chat}/messages"
    )
    assert route_template(f"/api/v2/chats/{chat}") == "/api/v2/chats/{chat}"
    assert route_template("/api/v2/chats/models") == "/api/v2/chats/models"
    assert route_template("/api/experimental/chats/model-configs") == (
        "/api/experimental/chats/model-configs"
    )
    assert route_template("/api/v2/organizations/6f2d-aa/chats/models") == (
        "/api/v2/organizations/{organization}/chats/models"
    )
    assert (
        route_template(f"/api/v2/chats/{chat}/queue/12") == "/api/v2/chats/{chat}/queue/{message}"
    )
    assert route_template(f"/api/v2/chats/files/{chat}") == "/api/v2/chats/files/{file}"
    assert route_template("/api/v2/workspaceagents/abc123/x") == "/api/v2/workspaceagents/{agent}/x"
    assert route_template("/api/v2/something/1234") == "/api/v2/something/{id}"


def test_a_client_forgets_the_agents_it_traced_for_once_they_are_gone() -> None:
    import gc

    import coder_io_sync
    from coder_integrations.otel import instrument

    client = coder_io_sync.CoderChatClient("http://127.0.0.1:9", "t0ken")
    with client:
        for _ in range(3):
            agent = coder_io_sync.CoderAgent(client=client, organization_id="org")
            instrument(agent)
            assert instrument(agent) is agent
            agent.close()
        del agent
    # The client's tracer holds its agents' tracers weakly: they go with their sessions.
    gc.collect()
    assert len(client._otel_tracer._agents) == 0
