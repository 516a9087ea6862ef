"""Fixtures of the store conformance suite: ``store``, the same test body on every store
(``kinds``); the PostgreSQL server and schemas come from ``tests/conftest.py``."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any

import pytest

# The fake servers of tests/integration, for the workflow scenarios on every runtime.
from tests.integration.conftest import make_server  # noqa: F401

from .kinds import KINDS, SHARED_KINDS, StoreMaker


@pytest.fixture(params=KINDS)
def maker(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[StoreMaker]:
    made = StoreMaker(request.param, tmp_path, request)
    try:
        yield made
    finally:
        made.close()


@pytest.fixture
def store(maker: StoreMaker) -> Any:
    """A fresh, empty store of each kind."""
    return maker.open()


@pytest.fixture(params=SHARED_KINDS)
def shared_maker(request: pytest.FixtureRequest, tmp_path: pathlib.Path) -> Iterator[StoreMaker]:
    made = StoreMaker(request.param, tmp_path, request)
    try:
        yield made
    finally:
        made.close()
