"""Placeholders in scripts, filled in when a step runs: ``{name}`` and ``{name.path}``.

The names:

* ``prompt``: the user's prompt text;
* a named group of the script book rule that matched the prompt: the text it captured
  (``""`` when the group took no part in the match);
* ``tool_result``: the latest tool result (``null`` before any); ``tool_results``: every result
  of the latest pause, as an array;
* ``attachment``: the text of the first text file attached to the prompt (``""`` when none);
  ``attachments``: every attached file, as objects with ``name``, ``media_type``, ``size`` and
  ``text`` (``null`` for a binary file).

A path picks inside the value: ``{tool_result.city}``, ``{tool_results.1.temp_c}``,
``{tool_result.items[0].name}``. A path that leads nowhere gives ``null``.

In text (``Say``, ``Think``) ``{tool_result}``, ``{tool_results}`` and ``{attachments}`` stand as
compact JSON text (a string result in quotes); a picked field or a capture that is a string
stands as it is, any other value as compact JSON. In tool arguments and server tool results (any JSON), a string that is exactly one placeholder
becomes the value itself, so ``"{tool_result.temp_c}"`` stays a number; other strings are
filled in as text. For a client tool the chat registered with an input schema, a filled-in
string whose property is an integer, number or boolean is converted when it reads as one
(``"{count}"`` captured as ``"3"`` is sent as ``3``).

Braces that hold none of these names are left as written, so JSON text in a ``Say`` needs no
escaping.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any, Final

import attrs

from .._json import js_stringify, loads
from ._context import ScriptContext

__all__ = ["BUILTIN_NAMES", "PLACEHOLDER", "Bindings"]

PLACEHOLDER: Final = re.compile(r"\{([A-Za-z_][A-Za-z0-9_]*)((?:\.[A-Za-z0-9_-]+|\[[0-9]+\])*)\}")
#: The names every step knows; a rule's named groups may not reuse them.
BUILTIN_NAMES: Final = frozenset(
    {"prompt", "tool_result", "tool_results", "attachment", "attachments"}
)
#: Names whose whole value stands in text as JSON, even when it is a string.
_JSON_NAMES: Final = frozenset({"tool_result", "tool_results", "attachments"})
_STEP: Final = re.compile(r"\.([A-Za-z0-9_-]+)|\[([0-9]+)\]")
_UNKNOWN: Final = object()


def _pick(value: Any, path: str) -> Any:
    for match in _STEP.finditer(path):
        key, index = match.group(1), match.group(2)
        if isinstance(value, Mapping) and key is not None:
            value = value.get(key)
        elif isinstance(value, list) and (index or key or "").isdigit():
            position = int(index or key)
            value = value[position] if position < len(value) else None
        else:
            return None
    return value


def _as_text(value: Any) -> str:
    return value if isinstance(value, str) else js_stringify(value)


def _coerce(text: str, schema: Any) -> Any:
    """``text`` as the scalar type ``schema`` asks for, when it reads as one."""
    kind = schema.get("type") if isinstance(schema, Mapping) else None
    stripped = text.strip()
    if kind == "boolean" and stripped.lower() in ("true", "false"):
        return stripped.lower() == "true"
    if kind in ("integer", "number") and re.fullmatch(r"-?\d+(\.\d+)?([eE][-+]?\d+)?", stripped):
        number = loads(stripped)
        if kind == "integer" and isinstance(number, float) and number.is_integer():
            return int(number)
        if kind == "number" or isinstance(number, int):
            return number
    return text


@attrs.frozen
class Bindings:
    """The values placeholders name, for one step of a turn."""

    values: Mapping[str, Any]

    @classmethod
    def for_step(cls, ctx: ScriptContext, tool_results: Sequence[Any]) -> Bindings:
        """The names of the module docstring for a step of ``ctx``'s turn that follows
        ``tool_results`` (the latest pause's results; empty before any)."""
        values: dict[str, Any] = dict(ctx.captures)
        texts = [a.text for a in ctx.attachments if a.text is not None]
        values.update(
            prompt=ctx.prompt,
            tool_result=tool_results[-1] if tool_results else None,
            tool_results=list(tool_results),
            attachment=texts[0] if texts else "",
            attachments=[a.to_json() for a in ctx.attachments],
        )
        return cls(values)

    def _lookup(self, match: re.Match[str]) -> Any:
        name, path = match.group(1), match.group(2)
        if name not in self.values:
            return _UNKNOWN
        return _pick(self.values[name], path)

    def text(self, template: str) -> str:
        """``template`` with every known placeholder filled in as text."""
        if "{" not in template:
            return template

        def fill(match: re.Match[str]) -> str:
            found = self._lookup(match)
            if found is _UNKNOWN:
                return match.group(0)
            if match.group(1) in _JSON_NAMES and not match.group(2):
                return js_stringify(found)
            return _as_text(found)

        return PLACEHOLDER.sub(fill, template)

    def value(self, template: Any, schema: Any = None) -> Any:
        """A JSON value with its strings filled in (see the module docstring); ``schema``
        (a JSON Schema, optional) converts filled-in strings to the scalar types it names."""
        if isinstance(template, str):
            if "{" not in template:
                return template
            whole = PLACEHOLDER.fullmatch(template)
            if whole is not None:
                found = self._lookup(whole)
                if found is not _UNKNOWN:
                    return _coerce(found, schema) if isinstance(found, str) else found
            filled = self.text(template)
            return _coerce(filled, schema) if filled != template else filled
        if isinstance(template, Mapping):
            props = schema.get("properties") if isinstance(schema, Mapping) else None
            return {
                key: self.value(
                    item, props.get(key) if isinstance(props, Mapping) else None
                )
                for key, item in template.items()
            }
        if isinstance(template, list):
            items = schema.get("items") if isinstance(schema, Mapping) else None
            return [self.value(item, items) for item in template]
        return template
