"""Fixtures of the hostile-server suite: the runtime parameter and the token check."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import pytest

from .runtimes import RUNTIMES, TOKEN


@pytest.fixture(params=RUNTIMES)
def runtime(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture(autouse=True)
def no_token_in_logs(caplog: pytest.LogCaptureFixture) -> Iterator[None]:
    caplog.set_level(logging.DEBUG)
    yield
    leaks = [r.getMessage() for r in caplog.records if TOKEN in r.getMessage()]
    assert not leaks, leaks[:3]
