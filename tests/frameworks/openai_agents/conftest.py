"""The OpenAI Agents SDK's tests run on asyncio with its tracing off (it would export to
OpenAI's servers)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from agents import set_tracing_disabled


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_tracing() -> Iterator[None]:
    set_tracing_disabled(True)
    yield
    set_tracing_disabled(False)
