"""Model configs listing and hint resolution (wire 8, D16)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coder_proto import CoderAgentError, CoderApiError, CoderNetworkError, CoderProtocolError
from coder_proto._rest.http import HttpResponse
from coder_proto._rest.model_hints import (
    LEGACY_MODEL_CONFIGS_PATH,
    ModelConfigs,
    ModelConfigsExchange,
    is_model_config_uuid,
    org_models_path,
    resolve_model_hint,
)
from coder_proto._rest.prefix import Failed, PrefixSelector, Retry
from coder_proto._wire import ChatModelConfig

UUID = "0f8fad5b-d9cb-469f-a165-70867728950e"
ORG_PATH = "/api/v2/organizations/org-1/chats/models"

CATALOG = {
    "models": [
        {
            "id": "m1",
            "organization_id": "org-1",
            "ai_provider_id": "p1",
            "model": "claude-sonnet-4-6",
            "display_name": "Claude Sonnet 4.6",
            "enabled": True,
        },
        {
            "id": "m2",
            "organization_id": "org-1",
            "ai_provider_id": "p2",
            "model": "gpt-5",
            "display_name": "GPT-5",
        },
        "not an object",
        {"id": "m3", "organization_id": "org-1", "ai_provider_id": "missing", "model": "x"},
    ],
    "providers": [{"id": "p1", "type": "anthropic"}, {"id": "p2", "type": "openai"}, 7],
    "unsupported_providers": [],
}


def reply(status: int, body: Any = None) -> HttpResponse:
    return HttpResponse(status=status, body=b"" if body is None else json.dumps(body).encode())


def cfg(
    id: str,
    model: str | None = None,
    provider: str | None = None,
    display: str | None = None,
    enabled: bool | None = None,
) -> ChatModelConfig:
    return ChatModelConfig(
        id=id, model=model, provider=provider, display_name=display, enabled=enabled
    )


# -- the listing exchange --------------------------------------------------------------------


def test_wire_8_org_route_first_and_providers_joined() -> None:
    exchange = ModelConfigsExchange("org-1")
    request = exchange.request
    assert (request.op, request.method, request.path, request.body) == (
        "list_model_configs",
        "GET",
        ORG_PATH,
        None,
    )
    outcome = exchange.on_response(reply(200, CATALOG))
    assert isinstance(outcome, ModelConfigs)
    assert outcome.source == "org"
    assert [(c.id, c.provider) for c in outcome.configs] == [
        ("m1", "anthropic"),
        ("m2", "openai"),
        ("m3", None),
    ]
    assert exchange.done


@pytest.mark.parametrize("body", [None, [], {"models": "x"}, {"models": [1, 2]}, {"providers": []}])
def test_wire_8_missing_or_malformed_lists_are_empty(body: Any) -> None:
    outcome = ModelConfigsExchange("org-1").on_response(reply(200, body))
    assert outcome == ModelConfigs((), "org")


def test_org_id_is_url_encoded_and_op_is_stamped() -> None:
    assert org_models_path("a/b c") == "/api/v2/organizations/a%2Fb%20c/chats/models"
    exchange = ModelConfigsExchange("org-1", op="resolve_model_config_id")
    assert exchange.request.op == "resolve_model_config_id"
    retry = exchange.on_response(reply(404))
    assert isinstance(retry, Retry)
    assert retry.request.op == "resolve_model_config_id"


def test_wire_8_org_404_falls_back_once_to_the_legacy_route() -> None:
    exchange = ModelConfigsExchange("org-1")
    retry = exchange.on_response(reply(404))
    assert isinstance(retry, Retry)
    assert (
        retry.request.path == LEGACY_MODEL_CONFIGS_PATH == "/api/experimental/chats/model-configs"
    )
    assert exchange.request == retry.request
    legacy = [
        {"id": "a", "organization_id": "org-1", "model": "m", "provider": "anthropic"},
        {"id": "b", "organization_id": "other-org", "model": "m"},
        {"id": "c", "model": "n"},
        "junk",
    ]
    outcome = exchange.on_response(reply(200, legacy))
    assert isinstance(outcome, ModelConfigs)
    assert outcome.source == "legacy"
    assert [(c.id, c.provider) for c in outcome.configs] == [("a", "anthropic"), ("c", None)]


def test_wire_8_legacy_non_array_body_means_no_configs() -> None:
    exchange = ModelConfigsExchange("org-1")
    exchange.on_response(reply(404))
    assert exchange.on_response(reply(200, {"models": []})) == ModelConfigs((), "legacy")


def test_wire_8_legacy_404_raises_the_org_route_error() -> None:
    exchange = ModelConfigsExchange("org-1")
    exchange.on_response(reply(404, {"message": "Route not found"}))
    outcome = exchange.on_response(reply(404, {"message": "legacy gone"}))
    assert isinstance(outcome, Failed)
    error = outcome.error
    assert isinstance(error, CoderApiError)
    assert (error.status, error.path, error.server_message) == (404, ORG_PATH, "Route not found")


def test_wire_8_other_legacy_errors_raise_themselves() -> None:
    exchange = ModelConfigsExchange("org-1")
    exchange.on_response(reply(404))
    outcome = exchange.on_response(reply(401, {"message": "unauthorized"}))
    assert isinstance(outcome, Failed)
    assert isinstance(outcome.error, CoderApiError)
    assert (outcome.error.status, outcome.error.path) == (401, LEGACY_MODEL_CONFIGS_PATH)


@pytest.mark.parametrize("status", [400, 401, 403, 500])
def test_wire_8_org_errors_other_than_404_do_not_fall_back(status: int) -> None:
    exchange = ModelConfigsExchange("org-1")
    outcome = exchange.on_response(reply(status))
    assert isinstance(outcome, Failed)
    assert isinstance(outcome.error, CoderApiError)
    assert (outcome.error.status, outcome.error.path) == (status, ORG_PATH)
    assert exchange.done


def test_network_errors_fail_the_listing() -> None:
    exchange = ModelConfigsExchange("org-1")
    outcome = exchange.on_network_error("refused")
    assert isinstance(outcome.error, CoderNetworkError)
    assert outcome.error.path == ORG_PATH
    exchange = ModelConfigsExchange("org-1")
    exchange.on_response(reply(404))
    assert exchange.on_network_error("refused").error.path == LEGACY_MODEL_CONFIGS_PATH  # type: ignore[attr-defined]


def test_malformed_provider_entries_are_a_protocol_error() -> None:
    outcome = ModelConfigsExchange("org-1").on_response(
        reply(200, {"models": [], "providers": [{"id": 5}]})
    )
    assert isinstance(outcome, Failed)
    assert isinstance(outcome.error, CoderProtocolError)


def test_deprecated_overload_without_org_calls_the_legacy_route_directly() -> None:
    exchange = ModelConfigsExchange(None)
    assert exchange.request.path == LEGACY_MODEL_CONFIGS_PATH
    outcome = exchange.on_response(
        reply(200, [{"id": "a", "organization_id": "x"}, {"id": "b", "organization_id": "y"}])
    )
    assert isinstance(outcome, ModelConfigs)
    assert [c.id for c in outcome.configs] == ["a", "b"]
    exchange = ModelConfigsExchange(None)
    failed = exchange.on_response(reply(404))
    assert isinstance(failed, Failed)
    assert isinstance(failed.error, CoderApiError)
    assert failed.error.path == LEGACY_MODEL_CONFIGS_PATH


def test_D16_the_listing_never_touches_the_prefix_lock() -> None:
    selector = PrefixSelector()
    exchange = ModelConfigsExchange("org-1")
    for status in (404, 200):
        prefixed = selector.begin(exchange.request)
        assert prefixed.request == exchange.request  # not rewritten, not negotiated
        prefixed.on_response(reply(status, []))
        exchange.on_response(reply(status, []))
    assert selector.prefix is None


def test_listing_misuse_is_a_library_error() -> None:
    with pytest.raises(CoderAgentError, match="op"):
        ModelConfigsExchange("org-1", op="get_chat")
    with pytest.raises(CoderAgentError, match="organization_id"):
        ModelConfigsExchange("  ")
    exchange = ModelConfigsExchange("org-1")
    exchange.on_response(reply(500))
    with pytest.raises(CoderAgentError):
        exchange.on_response(reply(200))
    with pytest.raises(CoderAgentError):
        exchange.on_network_error("x")


# -- hint resolution -------------------------------------------------------------------------


@pytest.mark.parametrize("hint", [UUID, UUID.upper(), "0F8FAD5B-d9cb-469f-A165-70867728950E"])
def test_wire_8_step_1_uuid_is_returned_as_is_without_configs(hint: str) -> None:
    assert is_model_config_uuid(hint)
    assert resolve_model_hint(hint, []) == hint


@pytest.mark.parametrize(
    "hint", ["", "claude", UUID + "0", UUID[:-1], f" {UUID}", "{" + UUID + "}"]
)
def test_not_uuids(hint: str) -> None:
    assert not is_model_config_uuid(hint)


def test_wire_8_step_2_disabled_configs_are_ignored_unless_all_are_disabled() -> None:
    configs = [cfg("off", "gpt-5", enabled=False), cfg("on", "gpt-5-mini", enabled=None)]
    assert resolve_model_hint("gpt-5", configs) == "on"  # substring of an enabled one wins
    assert resolve_model_hint("gpt-5", [cfg("off", "gpt-5", enabled=False)]) == "off"


def test_wire_8_step_4_exact_provider_and_model() -> None:
    configs = [cfg("a", "Shared-Model", "OpenAI"), cfg("b", "shared-model", "anthropic")]
    assert resolve_model_hint("Anthropic:SHARED-MODEL", configs) == "b"
    assert resolve_model_hint("shared-model", configs) == "a"  # no provider: first exact model


def test_wire_8_step_5_model_match_ignores_an_unknown_provider() -> None:
    configs = [cfg("a", "gpt-5", "openai"), cfg("b", "claude", None)]
    assert resolve_model_hint("azure:gpt-5", configs) == "a"
    assert resolve_model_hint("anthropic:claude", configs) == "b"  # D16: no provider string


def test_wire_8_step_6_display_name_contains_the_whole_hint() -> None:
    configs = [cfg("a", "m-1", "x", "Claude Sonnet 4.6"), cfg("b", "sonnet", "x", "Other")]
    assert resolve_model_hint("sonnet 4", configs) == "a"
    # Whole hint including the provider prefix: "x:sonnet" is not in any display name, so
    # step 7 (model contains "sonnet") picks b.
    assert resolve_model_hint("x:sonnet", configs) == "b"
    assert (
        resolve_model_hint("Anthropic: Sonnet", [cfg("c", None, None, "anthropic: sonnet v2")])
        == "c"
    )


def test_wire_8_step_7_model_substring() -> None:
    configs = [cfg("a", None, None, "Display"), cfg("b", "claude-opus-4", "anthropic")]
    assert resolve_model_hint("opus", configs) == "b"
    assert resolve_model_hint("anthropic:opus", configs) == "b"


def test_wire_8_order_exact_beats_model_beats_display_beats_substring() -> None:
    sub = cfg("sub", "gpt-5-turbo", "openai")
    display = cfg("display", "zzz", "openai", "my gpt-5 model")
    model_only = cfg("model", "gpt-5", "azure")
    exact = cfg("exact", "gpt-5", "openai")
    configs = [sub, display, model_only, exact]
    assert resolve_model_hint("openai:gpt-5", configs) == "exact"
    assert resolve_model_hint("other:gpt-5", configs) == "model"
    assert resolve_model_hint("gpt-5 model", configs) == "display"
    assert resolve_model_hint("turbo", configs) == "sub"


def test_wire_8_step_8_no_match_is_none() -> None:
    assert resolve_model_hint("nothing", [cfg("a", "gpt-5", "openai", "GPT")]) is None
    assert resolve_model_hint("gpt", []) is None


def test_hint_edge_cases() -> None:
    configs = [cfg("", "gpt-5"), cfg("b", "gpt-5")]
    assert resolve_model_hint("gpt-5", configs) == "b"  # configs without an id are never chosen
    assert resolve_model_hint("", configs) is None
    with pytest.raises(CoderAgentError, match="model hint must be a string"):
        resolve_model_hint(None, configs)  # type: ignore[arg-type]
    # Only the first colon splits.
    assert resolve_model_hint("p:a:b", [cfg("x", "a:b", "p")]) == "x"


def test_resolution_works_on_parsed_catalog_entries() -> None:
    outcome = ModelConfigsExchange("org-1").on_response(reply(200, CATALOG))
    assert isinstance(outcome, ModelConfigs)
    assert resolve_model_hint("anthropic:claude-sonnet-4-6", outcome.configs) == "m1"
    assert resolve_model_hint("GPT-5", outcome.configs) == "m2"
    assert resolve_model_hint("Sonnet 4.6", outcome.configs) == "m1"


_text = st.text(alphabet="abAB-:", max_size=6)


@settings(max_examples=300, deadline=None)
@given(
    hint=_text,
    rows=st.lists(
        st.tuples(
            st.none() | _text, st.none() | _text, st.none() | _text, st.none() | st.booleans()
        ),
        max_size=5,
    ),
)
def test_wire_8_resolution_properties(hint: str, rows: list[tuple[Any, Any, Any, Any]]) -> None:
    """The answer is an id of the pool (or None), and an exact case-insensitive model match in
    the pool always resolves to a config with that model."""
    configs = [cfg(f"id{i}", m, p, d, e) for i, (m, p, d, e) in enumerate(rows)]
    chosen = resolve_model_hint(hint, configs)
    pool = [c for c in configs if c.enabled is not False] or configs
    assert chosen is None or chosen in {c.id for c in pool}
    model = hint.partition(":")[2] if ":" in hint else hint
    if hint and any((c.model or "").lower() == model.lower() and c.model is not None for c in pool):
        picked = next(c for c in pool if c.id == chosen)
        assert (picked.model or "").lower() == model.lower()
