"""The agent session: one chat, its resume cursor and its cleanup ledger (state machines D.1,
H.1-H.6; D4, D10, D12, D22).

A ``Session`` is the state one agent keeps between turns (``SessionState``). Construction does
no I/O. Everything that talks to the server is a machine the session creates and an adapter
drives:

* ``generate`` / ``stream`` start a ``Turn`` (the whole client-tool loop); ``segment`` starts one
  model round trip (the reference model's ``doStream``/``doGenerate``);
* ``interrupt``, ``archive`` and ``dispose`` start the cleanup calls of H.3-H.5.

Only one turn runs at a time (the single-flight guard of G.2). The session owns the turn
stream that a client-tool pause keeps open (H.6): while a turn runs, the turn forwards the
stream's connection inputs here; between turns an adapter may keep feeding them here
(``connection_made`` ... ``tick``, ``actions()``, ``next_deadline()``) so that a paused stream
keeps redialing in the background, or leave the socket unread until the next turn.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from .._errors import CoderAgentError
from .._wire.chats import DynamicTool
from .session_calls import SessionArchive, SessionDispose, SessionInterrupt
from .session_state import SessionState
from .turn import Turn

__all__ = ["Session"]

_SINGLE_FLIGHT: Final = (
    "A generation is already in flight on this agent (single-flight): wait for it to finish "
    "before starting another, or use one agent per concurrent session"
)


class Session(SessionState):
    """One agent's chat session (H.1): its state, and the turns and cleanup calls it starts.
    See the module docstring."""

    __slots__ = ()

    # -- turns -------------------------------------------------------------------------------

    def _check_single_flight(self) -> None:
        if self.in_flight is not None and not self.in_flight.done:
            raise CoderAgentError(_SINGLE_FLIGHT)

    def generate(
        self,
        prompt: object,
        *,
        now: float,
        tools: Sequence[DynamicTool] | None = None,
        warnings: Sequence[str] = (),
    ) -> Turn:
        """Start a whole turn in generate mode (the client-tool loop; an error event raises
        ``CoderChatError``, D2). ``tools`` replaces the configured client tools for this turn;
        ``warnings`` (unsupported settings such as a response format) ride on the first
        ``StreamStart``. Raises ``CoderAgentError`` when a turn is already running."""
        self._check_single_flight()
        return Turn(self, prompt, now=now, mode="generate", tools=tools, warnings=warnings)

    def stream(
        self,
        prompt: object,
        *,
        now: float,
        tools: Sequence[DynamicTool] | None = None,
        warnings: Sequence[str] = (),
        edit_message_id: int | None = None,
    ) -> Turn:
        """Start a whole turn in stream mode: output parts are delivered live in
        ``turn.parts``; an error event is delivered as an ``ErrorPart``. With
        ``edit_message_id`` the prompt replaces that user message of the chat (wire 2.4) and
        the turn streams the run the edit starts."""
        self._check_single_flight()
        return Turn(
            self,
            prompt,
            now=now,
            mode="stream",
            tools=tools,
            warnings=warnings,
            edit_message_id=edit_message_id,
        )

    def segment(
        self,
        prompt: object,
        *,
        now: float,
        mode: str = "stream",
        tools: Sequence[DynamicTool] | None = None,
        warnings: Sequence[str] = (),
    ) -> Turn:
        """Start one model round trip (G.2): the reference model's ``doStream`` /
        ``doGenerate``. A prompt ending in tool messages resumes a paused chat; a healthy pause
        keeps the stream for that resume (H.6)."""
        self._check_single_flight()
        return Turn(
            self, prompt, now=now, mode=mode, tools=tools, single_segment=True, warnings=warnings
        )

    # -- cleanup calls (H.3-H.5) -------------------------------------------------------------

    def interrupt(
        self, *, now: float, wait: bool = False, timeout: float | None = None
    ) -> SessionInterrupt:
        """``interrupt()`` (H.3, D4, D11)."""
        return SessionInterrupt(self, now=now, wait=wait, timeout=timeout)

    def archive(self, *, now: float) -> SessionArchive:
        """``archive()`` (H.4, D10)."""
        return SessionArchive(self, now=now)

    def dispose(self, *, now: float) -> SessionDispose:
        """Disposal (H.5): interrupt then archive, bounded, never raising."""
        return SessionDispose(self, now=now)
