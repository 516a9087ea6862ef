"""``AgentOptions`` (``coder_proto._agent.options``; H.2): one frozen, validated value for an
agent's settings; the rule that an explicit keyword overrides it (``option_keywords``); and
the public functions that take it, so the keyword lists cannot drift from the options."""

from __future__ import annotations

import inspect
import math
from typing import Any

import attrs
import pytest

import coder_io_asyncio
import coder_io_sync
import coder_io_trio
import coder_proto
from coder_proto import AgentOptions
from coder_proto._agent.options import OPTION_NAMES, option_keywords, resolve_options
from coder_proto._agent.tools import Tool, tool
from coder_proto._errors import CoderAgentError

ADAPTERS = (coder_io_asyncio, coder_io_trio, coder_io_sync)


@tool
def get_weather(city: str) -> str:
    """Get the weather for a city."""
    return city


def test_the_defaults_are_the_agents() -> None:
    options = AgentOptions()
    assert (options.max_steps, options.max_retries) == (64, 0)
    assert (options.settle_deadline, options.settle_retry_delay) == (15.0, 1.0)
    assert options.request_timeout is None and options.organization_id is None
    assert dict(options.tools) == {} and options.mcp_server_ids == ()


def test_tools_are_kept_as_a_read_only_mapping_by_name() -> None:
    def lookup(city: str) -> str:
        """Look a city up."""
        return city

    options = AgentOptions(tools=[get_weather, lookup])
    assert list(options.tools) == ["get_weather", "lookup"]
    assert all(isinstance(t, Tool) for t in options.tools.values())
    with pytest.raises(TypeError):
        options.tools["other"] = get_weather  # type: ignore[index]
    renamed = AgentOptions(tools={"weather": get_weather})
    assert list(renamed.tools) == ["weather"] and renamed.tools["weather"].name == "weather"
    assert "get_weather" in repr(options)
    with pytest.raises(CoderAgentError, match="duplicate tool name"):
        AgentOptions(tools=[get_weather, get_weather])


def test_the_object_is_frozen_and_changed_by_copy() -> None:
    options = AgentOptions(model="m", mcp_server_ids=["a", "b"])
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        options.model = "other"  # type: ignore[misc]
    changed = attrs.evolve(options, model="other")
    assert (changed.model, changed.mcp_server_ids) == ("other", ("a", "b"))
    assert options.model == "m" and changed == AgentOptions(
        model="other", mcp_server_ids=("a", "b")
    )


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"model": 5}, "model must be a string"),
        ({"organization_id": b"org"}, "organization_id must be a string"),
        ({"instructions": ["x"]}, "instructions must be a string"),
        ({"busy_behavior": "drop"}, "busy_behavior must be"),
        ({"max_steps": 0}, "max_steps must be a positive integer"),
        ({"max_steps": True}, "max_steps must be a positive integer"),
        ({"max_retries": -1}, "max_retries must be a non-negative integer"),
        ({"request_timeout": "30"}, "request_timeout must be a number"),
        ({"request_timeout": math.nan}, "request_timeout must be a number"),
        ({"mcp_server_ids": "abc"}, "not one string"),
        ({"mcp_server_ids": ["a", ""]}, "non-empty strings"),
        ({"mcp_server_ids": 5}, "sequence of ids"),
        ({"tools": [42]}, "not a tool"),
    ],
)
def test_a_bad_setting_is_a_library_error_at_construction(
    settings: dict[str, Any], message: str
) -> None:
    with pytest.raises(CoderAgentError, match=message):
        AgentOptions(**settings)


def test_durations_fall_back_to_their_defaults_as_the_agent_does() -> None:
    options = AgentOptions(settle_deadline=-1, settle_retry_delay=math.nan)
    assert (options.settle_deadline, options.settle_retry_delay) == (15.0, 1.0)


def test_an_explicit_keyword_overrides_the_options_object() -> None:
    base = AgentOptions(model="m", request_timeout=30.0)
    assert resolve_options(None, {"model": "x"}) == AgentOptions(model="x")
    assert resolve_options(base, {}) is base
    assert resolve_options(base, {"request_timeout": None}) == AgentOptions(model="m")
    with pytest.raises(CoderAgentError, match="options must be an AgentOptions"):
        resolve_options({"model": "m"}, {})


def test_option_keywords_passes_what_the_caller_gave_explicitly() -> None:
    seen: list[AgentOptions] = []

    @option_keywords
    def configure(
        name: str,
        *,
        options: AgentOptions | None = None,
        model: str | None = None,
        request_timeout: float | None = None,
    ) -> str:
        assert options is not None
        seen.append(options)
        return name

    base = AgentOptions(model="m", request_timeout=30.0)
    assert configure("a") == "a"
    configure("b", options=base)
    configure("c", options=base, model=None)
    configure(name="d", options=base, request_timeout=5)
    assert seen == [
        AgentOptions(),
        base,
        AgentOptions(request_timeout=30.0),
        AgentOptions(model="m", request_timeout=5),
    ]
    with pytest.raises(TypeError):
        configure("e", max_steps=3)  # type: ignore[call-arg]
    assert "model" in inspect.signature(configure).parameters and configure.__name__ == "configure"


async def _async_configure(
    *, options: AgentOptions | None = None, model: str | None = None
) -> AgentOptions:
    assert options is not None
    return options


def test_option_keywords_keeps_a_coroutine_function_one() -> None:
    configure = option_keywords(_async_configure)
    assert inspect.iscoroutinefunction(configure)
    coroutine = configure(options=AgentOptions(model="m"), model="x")
    with pytest.raises(StopIteration) as stop:
        coroutine.send(None)
    assert stop.value.value == AgentOptions(model="x")


def test_option_keywords_refuses_a_function_without_options() -> None:
    def plain(model: str | None = None) -> None:
        return None

    with pytest.raises(TypeError, match="takes no options"):
        option_keywords(plain)


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.__name__)
def test_every_adapter_exports_the_cores_options(adapter: Any) -> None:
    assert "AgentOptions" in coder_proto.__all__ and "AgentOptions" in adapter.__all__
    assert adapter.AgentOptions is AgentOptions


@pytest.mark.parametrize("adapter", ADAPTERS, ids=lambda a: a.__name__)
@pytest.mark.parametrize("name", ["CoderAgent", "run_turn"])
def test_every_option_is_a_keyword_of_the_agent_and_of_run_turn_with_its_default(
    adapter: Any, name: str
) -> None:
    """The keyword lists of the public signatures and ``AgentOptions`` cannot drift: every
    field is a keyword, with the options' default (``tools`` defaults to none)."""
    parameters = inspect.signature(getattr(adapter, name)).parameters
    assert parameters["options"].default is None
    defaults = AgentOptions()
    for field in OPTION_NAMES:
        default = parameters[field].default
        expected = getattr(defaults, field)
        if field == "tools":
            assert default is None and dict(expected) == {}
        else:
            assert default == expected, field
