"""The fake server's own errors.

``FakeApiError`` is how the model refuses a request (it becomes the error response the real
server would send); ``FakeConfigError`` says a setting handed to the fake is malformed, and
``ScriptError`` that a script or script book is.
"""

from __future__ import annotations

from typing import Any

from .._errors import CoderAgentError

__all__ = ["FakeApiError", "FakeConfigError", "ScriptError"]


class FakeConfigError(CoderAgentError):
    """A setting of the fake server (a model catalog, a fault, a flag) is malformed."""


class ScriptError(FakeConfigError):
    """A script (or its JSON form) is malformed."""


class FakeApiError(CoderAgentError):
    """A request the fake refuses, as the real server would (status plus error body)."""

    def __init__(
        self,
        status: int,
        message: str,
        *,
        detail: str | None = None,
        validations: list[dict[str, str]] | None = None,
    ) -> None:
        super().__init__(f"{status} {message}" + (f" ({detail})" if detail else ""))
        self.status = status
        self.server_message = message
        self.detail = detail
        self.validations = validations

    def _state(self) -> dict[str, Any]:
        return {"status": self.status}

    def __reduce__(self) -> tuple[Any, ...]:
        return (
            _rebuild_api_error,
            (self.status, self.server_message, self.detail, self.validations),
        )

    def body(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message": self.server_message}
        if self.detail is not None:
            out["detail"] = self.detail
        if self.validations is not None:
            out["validations"] = self.validations
        return out


def _rebuild_api_error(
    status: int, message: str, detail: str | None, validations: list[dict[str, str]] | None
) -> FakeApiError:
    return FakeApiError(status, message, detail=detail, validations=validations)
