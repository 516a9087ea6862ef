"""Corners of the model's parts that the route tests do not reach: the catalog as it changes,
catalog files, placeholders that pick into the wrong kind of value, and direct operations."""

from __future__ import annotations

from typing import Any

import pytest

from coder_proto.fake import (
    FakeCoderModel,
    FakeConfig,
    FakeConfigError,
    FakeModelSpec,
    Say,
    Script,
    ScriptContext,
    ScriptRule,
    models_from_json,
)
from coder_proto.fake._template import Bindings

from .support import Api


def test_models_added_later_get_ids_and_providers() -> None:
    api = Api()
    model = api.model
    model.config.models = (
        *model.config.models,
        FakeModelSpec(model="late", display_name="Late", provider="newco"),
    )
    catalog = api.request(
        "GET", f"/api/v2/organizations/{model.organization_id}/chats/models", absolute=True
    ).json()
    late = next(m for m in catalog["models"] if m["model"] == "late")
    assert late["id"] == model.model_config_ids["late"]
    assert "newco" in {p["type"] for p in catalog["providers"]}
    chat_id = api.create("hi", model_config_id=late["id"])
    assert api.chat(chat_id)["last_model_config_id"] == late["id"]


def test_providers_no_model_uses_are_not_listed() -> None:
    api = Api(experimental_mount=True)
    api.model.config.models = tuple(m for m in api.model.config.models if m.provider != "openai")
    catalog = api.request("GET", "/api/experimental/chats/models", absolute=True).json()
    assert {p["type"] for p in catalog["providers"]} == {"anthropic"}


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ("gpt", "expected an object"),
        ({"model": "a", "compression_threshold": 101}, "from 0 to 100"),
        ({"model": "a", "reasoning_efforts": ["low", 3]}, "list of names"),
        ({"model": "a", "provider": ""}, "'provider' must not be empty"),
        ({"model": " "}, "non-empty string"),
        ({"model": "a", "context_limit": True}, "wrong type"),
    ],
)
def test_catalog_entries_are_checked(entry: Any, message: str) -> None:
    with pytest.raises(FakeConfigError, match=message):
        models_from_json([entry])


def test_a_catalog_entry_takes_the_defaults() -> None:
    (spec,) = models_from_json({"models": [{"model": "m"}]})
    assert spec == FakeModelSpec(model="m", display_name="m")
    assert models_from_json([]) == ()


def test_an_empty_catalog_refuses_new_chats() -> None:
    api = Api(models=())
    body = {
        "organization_id": api.model.organization_id,
        "content": [{"type": "text", "text": "x"}],
    }
    refused = api.request("POST", "", body)
    assert refused.status == 400
    assert refused.json()["message"] == "No chat model is available in this organization."


@pytest.mark.parametrize(
    ("template", "text"),
    [
        ("{prompt.length}", "null"),
        ("{tool_result.0}", "null"),
        ("{tool_results.first}", "null"),
        ("{tool_results[5]}", "null"),
        ("{attachments[0]}", "null"),
        ("{tool_result[0]}", "null"),
    ],
)
def test_paths_into_the_wrong_kind_of_value_give_null(template: str, text: str) -> None:
    bindings = Bindings.for_step(ScriptContext(chat_id="c", prompt="p"), [{"a": 1}])
    assert bindings.text(template) == text


def test_unknown_whole_placeholders_in_arguments_stay_as_written() -> None:
    bindings = Bindings.for_step(ScriptContext(chat_id="c", prompt="p"), [])
    assert bindings.value({"a": "{nope}", "b": 2, "c": [None, "{prompt}!"]}) == {
        "a": "{nope}",
        "b": 2,
        "c": [None, "p!"],
    }


def test_rules_match_case_insensitively_across_lines() -> None:
    rule = ScriptRule(r"first.*second", Script([Say("x")]))
    assert rule.matches("FIRST line\nsecond line")
    assert not rule.matches("second first")


def test_direct_operations_and_the_clock() -> None:
    model = FakeCoderModel(FakeConfig(wall_clock_offset=0.0, chunk_delay=0.0))
    assert model.timestamp(86_400.5) == "1970-01-02T00:00:00.5Z"
    chat = model.create_chat(
        {"organization_id": model.organization_id, "content": [{"type": "text", "text": "hi"}]},
        now=1.0,
    )
    assert model.chat(chat.id) is chat and chat.status == "running"
    model.tick(5.0)
    assert chat.status == "waiting"
    assert model.next_deadline() is None
