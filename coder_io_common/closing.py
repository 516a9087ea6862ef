"""The context-manager protocol of the public classes: leaving a ``with`` / ``async with``
block closes the object (``close()`` / ``aclose()``), whatever ended the block."""

from __future__ import annotations

from types import TracebackType
from typing import TypeVar

__all__ = ["AsyncClosing", "Closing"]

S = TypeVar("S")


class Closing:
    """``with obj:`` returns ``obj`` and calls ``obj.close()`` on the way out."""

    def close(self) -> None:
        raise NotImplementedError

    def __enter__(self: S) -> S:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class AsyncClosing:
    """``async with obj:`` returns ``obj`` and awaits ``obj.aclose()`` on the way out."""

    async def aclose(self) -> None:
        raise NotImplementedError

    async def __aenter__(self: S) -> S:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()
