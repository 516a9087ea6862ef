"""The words of the real server's chat state machine, for the ``detail`` of its 409s.

The server checks every change of a chat against a table of execution states: a status letter
(``W`` waiting, ``E`` error, ``R`` running, ``I`` interrupting, ``A`` requires_action,
``P`` paused), the
queue (``0`` empty, ``1`` not; none for waiting), and ``X`` before the letter for an archived
chat. A change the table does not allow is refused with "chat state transition <name> not
allowed from state <state>", which the route puts in the 409's ``detail``.
"""

from __future__ import annotations

from typing import Final

from ._errors import FakeApiError
from ._rows import FakeChat

__all__ = ["execution_state", "transition_refused"]

_LETTERS: Final = {
    "waiting": "W",
    "error": "E",
    "running": "R",
    "interrupting": "I",
    "requires_action": "A",
    "paused": "P",
}


def execution_state(chat: FakeChat) -> str:
    """The chat's execution state as the server names it (``W``, ``E0``, ``R1`` ...). The
    fake refuses changes to archived chats before the table is asked, so the archived states
    never appear here; a status outside the table keeps its own name."""
    letter = _LETTERS.get(chat.status, chat.status)
    return letter if letter == "W" else letter + ("1" if chat.queue else "0")


def transition_refused(message: str, transition: str, chat: FakeChat) -> FakeApiError:
    """The 409 of a change the state table refuses: ``message`` with the server's detail."""
    return FakeApiError(
        409,
        message,
        detail=f"chat state transition {transition} not allowed from state {execution_state(chat)}",
    )
