"""The script book: which script the fake's model plays for each turn.

``ScriptBook`` tries, in order: one-shot scripts pushed with ``push`` (first in, first out),
then the first rule whose regular expression matches the prompt, then the default
(``default_script`` unless replaced). A rule's named groups (``(?P<city>\\w+)``) are captured
into the turn's ``ScriptContext.captures``, where the script's placeholders (``{city}``) and a
script factory find them. Books load from JSON (``ScriptBook.from_json``).
"""

from __future__ import annotations

import re
from collections import deque
from collections.abc import Mapping
from typing import Any

import attrs

from ._context import ScriptContext, ScriptFactory
from ._default_script import default_script
from ._errors import ScriptError
from ._script import Script
from ._template import BUILTIN_NAMES

__all__ = ["ScriptBook", "ScriptRule"]

_FLAGS = re.IGNORECASE | re.DOTALL


def _compile(pattern: str) -> re.Pattern[str]:
    try:
        compiled = re.compile(pattern, _FLAGS)
    except re.error as exc:
        raise ScriptError(f"invalid regular expression {pattern!r}: {exc}") from None
    clash = sorted(set(compiled.groupindex) & BUILTIN_NAMES)
    if clash:
        raise ScriptError(
            f"the group name {clash[0]!r} in {pattern!r} is taken by a built-in placeholder"
        )
    return compiled


@attrs.frozen
class ScriptRule:
    """Use ``script`` when ``pattern`` (a regular expression, searched case-insensitively,
    ``.`` matching newlines too) matches the prompt."""

    pattern: str
    script: Script | ScriptFactory
    _compiled: re.Pattern[str] = attrs.field(
        init=False, eq=False, repr=False, default=attrs.Factory(lambda s: _compile(s.pattern), True)
    )

    def matches(self, prompt: str) -> bool:
        return self._compiled.search(prompt) is not None

    def captures(self, prompt: str) -> dict[str, str] | None:
        """The named groups of the match in ``prompt`` (``None``: no match)."""
        found = self._compiled.search(prompt)
        if found is None:
            return None
        return {name: value or "" for name, value in found.groupdict().items()}


def _resolve(script: Script | ScriptFactory, ctx: ScriptContext) -> Script:
    if isinstance(script, Script):
        return script
    result = script(ctx)
    if not isinstance(result, Script):
        raise ScriptError(f"script factory returned {type(result).__name__}, not a Script")
    return result


@attrs.define
class ScriptBook:
    """Chooses the script for each turn (see the module docstring)."""

    rules: list[ScriptRule] = attrs.Factory(list)
    default: Script | ScriptFactory | None = None
    _pending: deque[Script] = attrs.field(factory=deque, alias="pending")

    def push(self, script: Script) -> None:
        """Use ``script`` for the next turn that starts on any chat (once)."""
        self._pending.append(script)

    def waiting(self) -> tuple[Script, ...]:
        """The pushed scripts no turn has used yet, oldest first."""
        return tuple(self._pending)

    def add(self, pattern: str, script: Script | ScriptFactory) -> None:
        """Append a rule (rules are tried in order). ``ScriptError`` when ``pattern`` is not a
        regular expression or names a group like a built-in placeholder."""
        self.rules.append(ScriptRule(pattern, script))

    def choose(self, ctx: ScriptContext) -> tuple[Script, ScriptContext]:
        """The script for the turn of ``ctx``, and ``ctx`` with the matching rule's captures
        (which a factory receives too)."""
        if self._pending:
            return self._pending.popleft(), ctx
        for rule in self.rules:
            captures = rule.captures(ctx.prompt)
            if captures is not None:
                ctx = attrs.evolve(ctx, captures=captures)
                return _resolve(rule.script, ctx), ctx
        return _resolve(self.default if self.default is not None else default_script, ctx), ctx

    def select(self, ctx: ScriptContext) -> Script:
        """The script ``choose`` picks, without the captures."""
        return self.choose(ctx)[0]

    @classmethod
    def from_json(cls, value: Any) -> ScriptBook:
        """``{"rules": [{"match": regex, "script": <script>}], "default": <script>}``; raises
        ``ScriptError`` on anything malformed."""
        if not isinstance(value, Mapping):
            raise ScriptError("a script book is an object with 'rules' and/or 'default'")
        unknown = set(value) - {"rules", "default"}
        if unknown:
            raise ScriptError(f"unknown script book keys: {sorted(unknown)}")
        rules_json = value.get("rules", [])
        if not isinstance(rules_json, list):
            raise ScriptError("'rules' must be a list")
        book = cls()
        for n, rule in enumerate(rules_json):
            if not isinstance(rule, Mapping) or not isinstance(rule.get("match"), str):
                raise ScriptError(f"rule {n}: expected an object with a 'match' string")
            unknown = set(rule) - {"match", "script"}
            if unknown:
                raise ScriptError(f"rule {n}: unknown keys {sorted(unknown)}")
            try:
                book.add(rule["match"], Script.from_json(rule.get("script")))
            except ScriptError as exc:
                raise ScriptError(f"rule {n}: {exc}") from None
        if value.get("default") is not None:
            book.default = Script.from_json(value["default"])
        return book
