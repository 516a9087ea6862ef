"""What the scripted model knows about the turn it plays: ``ScriptContext``.

The script book receives it to choose a script, a script factory to build one, and the
placeholders of the chosen script are filled from it (``_template``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, TypeAlias

import attrs

from ._script import Script

__all__ = ["PromptFile", "ScriptContext", "ScriptFactory"]


@attrs.frozen(kw_only=True)
class PromptFile:
    """A file attached to the prompt. ``text`` is its content decoded as UTF-8 when it is
    text (``text/*`` or ``application/json``), else ``None``."""

    name: str
    media_type: str
    size: int
    text: str | None = attrs.field(default=None, repr=False)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "media_type": self.media_type,
            "size": self.size,
            "text": self.text,
        }


@attrs.frozen(kw_only=True)
class ScriptContext:
    """What a script factory knows about the turn it scripts."""

    chat_id: str
    prompt: str
    #: The chat's dynamic tools as registered (``name``, ``description``, ``input_schema``).
    tools: tuple[Mapping[str, Any], ...] = ()
    #: 1 for the chat's first turn, then counting.
    turn: int = 1
    #: The files attached to the prompt, in order.
    attachments: tuple[PromptFile, ...] = ()
    #: The named groups of the script book rule that matched the prompt (``""`` for a group
    #: that did not take part in the match); empty for pushed and default scripts.
    captures: Mapping[str, str] = attrs.field(factory=dict)

    def tool(self, name: str) -> Mapping[str, Any] | None:
        """The registered dynamic tool called ``name``, if any."""
        return next((t for t in self.tools if t.get("name") == name), None)


ScriptFactory: TypeAlias = Callable[[ScriptContext], Script]
"""A function of the turn's ``ScriptContext`` that returns the turn's ``Script``."""
