"""What ``coder-agent`` shows while a turn runs.

``Printer`` writes a live stream: the answer's text to ``out``; reasoning and tool calls on
lines of their own, to ``aside`` (stderr for ``run``, so that stdout carries only the text).
On a terminal the reasoning is dim and prefixed, and never runs into the answer: a stream
that is a terminal shares one line state with every other stream on a terminal.

``Progress`` is the status line on stderr when stderr is a terminal: connecting, streaming,
redialing n/5 with its backoff, waiting for a client tool, queued behind another run, with the
elapsed time. It is fed the agent's transport events (``on_transport_event``) and the output
parts. Transient states are one line that is rewritten in place and erased before anything
else is written; a redial is a line of its own that stays. When stderr is not a terminal
(piped, redirected) ``Progress`` writes nothing at all.
"""

from __future__ import annotations

import threading
import time
from typing import Any, TextIO

__all__ = ["DIM", "RESET", "Printer", "Progress", "is_terminal"]

DIM = "\x1b[2m"
RESET = "\x1b[0m"
_ERASE = "\r\x1b[K"


def is_terminal(stream: TextIO) -> bool:
    """Whether ``stream`` is a terminal (a closed or odd stream is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, OSError, ValueError):
        return False


class _Lines:
    """Where each destination's last line stands. Every terminal is one destination: text on
    stdout and reasoning on stderr are the same screen."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.last: dict[object, str] = {}

    @staticmethod
    def key(stream: TextIO) -> object:
        return "terminal" if is_terminal(stream) else id(stream)


class Progress:
    """The transient status line on stderr (see the module docstring). ``enabled`` is whether
    stderr is a terminal; when it is not, every method is a no-op."""

    def __init__(self, err: TextIO, *, enabled: bool | None = None) -> None:
        self.err = err
        self.enabled = is_terminal(err) if enabled is None else enabled
        self.lines = _Lines()
        self.started = time.monotonic()
        self._status: str | None = None
        self._shown = False
        self._stop = threading.Event()
        self._ticker: threading.Thread | None = None

    # -- the status line ------------------------------------------------------------------------

    def _elapsed(self) -> str:
        return f"{time.monotonic() - self.started:.1f} s"

    def _draw(self) -> None:
        if self._status is None or self.lines.last.get("terminal") is not None:
            return  # only at the start of a line: never in the middle of the answer
        self.err.write(f"{_ERASE}{DIM}{self._status} ... {self._elapsed()}{RESET}")
        self.err.flush()
        self._shown = True

    def erase(self) -> None:
        """Erase the status line, if shown (before anything else is written)."""
        if self._shown:
            self.err.write(_ERASE)
            self.err.flush()
            self._shown = False

    def status(self, text: str | None) -> None:
        """Show ``text`` as the current state (``None``: no state)."""
        if not self.enabled:
            return
        with self.lines.lock:
            self._status = text
            self.erase()
            self._draw()
        if text is not None and self._ticker is None:
            self._ticker = threading.Thread(
                target=self._tick, name="coder-agent-progress", daemon=True
            )
            self._ticker.start()

    def note(self, text: str) -> None:
        """A line of its own that stays (a redial); the status line is drawn again after it."""
        if not self.enabled:
            return
        with self.lines.lock:
            self.erase()
            if self.lines.last.get("terminal") is not None:
                self.err.write("\n")
                self.lines.last.pop("terminal", None)
            self.err.write(f"{DIM}{text}{RESET}\n")
            self._draw()

    def _tick(self) -> None:
        while not self._stop.wait(0.25):
            with self.lines.lock:
                if self._shown:
                    self._draw()

    def start(self) -> None:
        """A new turn: the elapsed time counts from now."""
        self.started = time.monotonic()
        self.status("connecting")

    def stop(self) -> None:
        """The turn ended: no state; the ticker ends."""
        self.status(None)
        self._stop.set()
        if self._ticker is not None:
            self._ticker.join()
            self._ticker = None
        self._stop = threading.Event()

    def finished(self, what: str) -> None:
        """After a turn: ``what`` with the elapsed time, dim, on a line of its own."""
        self.stop()
        if self.enabled:
            self.note(f"{what} in {self._elapsed()}")

    # -- what moves the state -----------------------------------------------------------------

    def __call__(self, event: Any) -> None:
        """An ``on_transport_event`` hook."""
        if not self.enabled:
            return
        kind = event.type
        if kind == "ws:redial":
            self.note(
                f"stream lost; redialing {event.consecutive_failures}/"
                f"{event.max_consecutive_failures} in {event.backoff:.1f} s"
            )
            self.status("redialing")
        elif kind == "ws:dial":
            self.status("connecting to the stream" if event.attempt <= 1 else "redialing")
        elif kind == "ws:open":
            self.status("waiting for the model")
        elif kind == "ws:event":
            inner = event.event
            if getattr(inner, "type", None) == "queue_update":
                if inner.queued_messages:
                    count = len(inner.queued_messages)
                    self.status(f"queued behind another run ({count} in the queue)")
                elif self._status is not None and self._status.startswith("queued"):
                    self.status("waiting for the model")
        elif kind == "segment:start" and event.segment > 1:
            self.status("continuing")

    def part(self, part: Any) -> None:
        """An output part arrived: a client tool call waits for the tool; anything else
        means the answer is streaming."""
        if not self.enabled:
            return
        from coder_proto import ReasoningDelta, TextDelta, ToolCall

        kind = type(part)
        if kind is ToolCall and not part.provider_executed:
            self.status(f"waiting for the tool {part.tool_name}")
        elif kind in (TextDelta, ReasoningDelta, ToolCall) and self._status != "streaming":
            self.status("streaming")


class Printer:
    """Prints a live stream (see the module docstring). ``progress`` is erased before each
    write and shares the line state."""

    def __init__(
        self, out: TextIO, aside: TextIO | None = None, progress: Progress | None = None
    ) -> None:
        self.out = out
        self.aside = aside or out
        self.progress = progress
        self.lines = progress.lines if progress is not None else _Lines()

    def _write(self, stream: TextIO, kind: str, text: str, prefix: str = "") -> None:
        key = self.lines.key(stream)
        styled = kind == "reasoning" and is_terminal(stream)
        with self.lines.lock:
            if self.progress is not None:
                self.progress.erase()
            last = self.lines.last.get(key)
            if last != kind:
                if last is not None:
                    if last == "reasoning" and key == "terminal":
                        stream.write(RESET)
                    stream.write("\n")
                    stream.flush()
                stream.write(DIM + prefix if styled else prefix)
            stream.write(text)
            if kind == "tool":  # a line of its own, ended at once
                stream.write("\n")
                self.lines.last.pop(key, None)
            else:
                self.lines.last[key] = kind
            stream.flush()

    def part(self, part: Any) -> None:
        """Print one output part."""
        from coder_proto import ReasoningDelta, TextDelta, ToolCall

        kind = type(part)
        if kind is TextDelta:
            self._write(self.out, "text", part.delta)
        elif kind is ReasoningDelta:
            self._write(self.aside, "reasoning", part.delta, "(thinking) ")
        elif kind is ToolCall:
            where = "server" if part.provider_executed else "client"
            self._write(self.aside, "tool", f"[{where} tool call] {part.tool_name}({part.input})")
        if self.progress is not None:
            self.progress.part(part)

    def finish(self) -> None:
        """End the open lines (a stream that is closed meanwhile is skipped)."""
        with self.lines.lock:
            if self.progress is not None:
                self.progress.erase()
            streams = {self.lines.key(s): s for s in (self.out, self.aside)}
            for key, stream in streams.items():
                last = self.lines.last.get(key)
                if last is not None:
                    try:
                        if last == "reasoning" and is_terminal(stream):
                            stream.write(RESET)
                        stream.write("\n")
                        stream.flush()
                    except (OSError, ValueError):
                        pass
            self.lines.last.clear()
