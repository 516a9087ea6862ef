"""Thread-safe access to a served model: a proxy that holds the server's lock around every
attribute read, write and method call, and wakes the server afterwards."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

from coder_proto.fake import FakeCoderModel, FakeConfig, FakeCounters, Faults, ScriptBook

__all__ = ["Locked"]


class Locked:
    """A proxy that holds ``lock`` around every attribute access and call on ``target`` and
    runs ``after`` once the lock is released (to wake the server). Attributes that are
    themselves parts of the model come back proxied the same way; containers come back as
    copies, so a reader never iterates one the server is changing."""

    __slots__ = ("_after", "_lock", "_target")

    _PROXIED = (FakeCoderModel, FakeConfig, Faults, FakeCounters, ScriptBook)

    def __init__(self, target: Any, lock: threading.RLock, after: Callable[[], None]) -> None:
        object.__setattr__(self, "_target", target)
        object.__setattr__(self, "_lock", lock)
        object.__setattr__(self, "_after", after)

    def __getattr__(self, name: str) -> Any:
        lock, target, after = self._lock, self._target, self._after
        with lock:
            value = getattr(target, name)
            if isinstance(value, dict | list):
                value = type(value)(value)
        if isinstance(value, self._PROXIED):
            return Locked(value, lock, after)
        if callable(value) and not isinstance(value, type):
            method = value

            def call(*args: Any, **kwargs: Any) -> Any:
                with lock:
                    result = method(*args, **kwargs)
                after()
                return result

            return call
        return value

    def __setattr__(self, name: str, value: Any) -> None:
        with self._lock:
            setattr(self._target, name, value)
        self._after()

    def __repr__(self) -> str:
        return f"<locked {type(self._target).__name__}>"
