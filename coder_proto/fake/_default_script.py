"""The built-in demo model: the script the book plays when nothing else applies.

It calls a registered client tool the prompt names (``get_weather`` for a prompt mentioning
"weather"), with arguments guessed from the prompt by the tool's input schema; greets a
greeting; runs a provider-executed search when asked to "search"; and otherwise thinks briefly
and echoes the prompt.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ._context import ScriptContext
from ._script import CallClientTool, CallServerTool, Cite, Say, Script, Think

__all__ = ["default_script"]

_GREETING = re.compile(r"^\s*(hi|hello|hey|howdy|good (morning|afternoon|evening))\b", re.I)
_GENERIC_TOKENS = frozenset({"get", "set", "run", "do", "fetch", "tool", "call", "the", "a"})
_CAPITALISED = re.compile(r"\b(?:in|for|at|of|near)\s+([A-Z][\w'-]*(?:\s+[A-Z][\w'-]*)*)")
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")


def _tool_tokens(name: str) -> list[str]:
    spaced = re.sub(r"([a-z0-9])([A-Z])", r"\1 \2", name)
    tokens = [t.lower() for t in re.split(r"[\s_\-.]+", spaced) if t]
    return [t for t in tokens if t not in _GENERIC_TOKENS] or [name.lower()]


def _mentions(prompt: str, name: str) -> bool:
    low = prompt.lower()
    if name.lower() in low:
        return True
    return all(token in low for token in _tool_tokens(name))


def _guess_value(key: str, schema: Any, prompt: str) -> Any:
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    if isinstance(schema, Mapping) and isinstance(schema.get("enum"), list) and schema["enum"]:
        return schema["enum"][0]
    if kind in ("integer", "number"):
        found = _NUMBER.search(prompt)
        if found is None:
            return 1
        number = float(found.group())
        return int(number) if kind == "integer" or number.is_integer() else number
    if kind == "boolean":
        return True
    if kind == "array":
        return []
    if kind == "object":
        return {}
    place = _CAPITALISED.search(prompt)
    if place is not None and key.lower() in ("city", "location", "place", "country", "where"):
        return place.group(1).rstrip("?.!,")
    return place.group(1).rstrip("?.!,") if place is not None else prompt.strip()


def _guess_args(tool: Mapping[str, Any], prompt: str) -> dict[str, Any]:
    schema = tool.get("input_schema")
    props = schema.get("properties") if isinstance(schema, Mapping) else None
    if not isinstance(props, Mapping):
        return {}
    required = schema.get("required") if isinstance(schema, Mapping) else None
    keys = [k for k in required if k in props] if isinstance(required, list) else list(props)
    return {str(k): _guess_value(str(k), props[k], prompt) for k in keys}


def default_script(ctx: ScriptContext) -> Script:
    """The built-in demo model: calls a registered client tool the prompt names (for
    ``get_weather`` a prompt mentioning "weather"), greets a greeting, runs a server tool
    when asked to "search", and otherwise thinks briefly and echoes the prompt."""
    prompt = ctx.prompt.strip()
    for tool in ctx.tools:
        name = tool.get("name")
        if isinstance(name, str) and name and _mentions(prompt, name):
            return Script(
                (
                    Think(f"The user wants me to use {name}."),
                    CallClientTool(name=name, args=_guess_args(tool, prompt)),
                    Say(f"{name} returned {{tool_result}}."),
                )
            )
    if _GREETING.search(prompt):
        return Script(
            (Say("Hello! I am the fake Coder agent. Ask me anything and I will echo it back."),)
        )
    if re.search(r"\bsearch\b", prompt, re.I):
        return Script(
            (
                Think("I should search for that."),
                CallServerTool(
                    name="web_search",
                    args={"query": prompt},
                    result={"results": [{"title": "Example", "url": "https://example.com/"}]},
                    provider_executed=True,
                ),
                Cite(url="https://example.com/", title="Example"),
                Say("I found one result: https://example.com/"),
            )
        )
    if not prompt:
        return Script((Say("I received an empty prompt."),))
    return Script((Think("The user said something; I will echo it."), Say(f"You said: {prompt}")))
