"""Hostile REST answers, on every runtime, through the public client.

Every case asserts what a user can rely on whatever the server does: only library errors (or
the runtime's own deadline) escape, the call ends within its bound plus a generous margin (a
hang is caught, time is not measured here: ``tests/bench/hostile.py`` reports it), the
session token appears in no error, and no thread of the client's outlives ``close``.
"""

from __future__ import annotations

import pytest

from coder_proto import CoderAgentError

from .cases import BOUND, MARGIN, REST_CASES, Case
from .runtimes import ALLOWED, TOKEN, call, open_sockets
from .server import HostileServer


def _chain(error: BaseException) -> list[BaseException]:
    out: list[BaseException] = []
    seen: BaseException | None = error
    while seen is not None and seen not in out:
        out.append(seen)
        seen = seen.__cause__ or seen.__context__
    return out


def _params() -> list[object]:
    out: list[object] = []
    for case in REST_CASES:
        for runtime in ("asyncio", "trio", "sync"):
            out.append(pytest.param(case, runtime, id=f"{case.name}-{runtime}"))
    return out


@pytest.mark.timeout(60)
@pytest.mark.parametrize(("case", "runtime"), _params())
def test_a_hostile_rest_answer_ends_the_call_with_a_library_error(case: Case, runtime: str) -> None:
    sockets = open_sockets()
    with HostileServer(case.handler) as server:
        out = call(runtime, server.url, "get_chat", "c1", client=case.client)
    assert out.error is not None, f"the call returned {out.value!r}"
    assert isinstance(out.error, ALLOWED), repr(out.error)
    if case.expect is not None:
        assert isinstance(out.error, case.expect), repr(out.error)
    for error in _chain(out.error):
        assert TOKEN not in str(error) and TOKEN not in repr(error)
    if isinstance(out.error, CoderAgentError):
        text = str(out.error)
        text.encode("utf-8")  # valid Unicode (D32)
        assert len(text) <= 8192 + 512  # D30, with room for the library's own words
        assert "internal error" not in text and "Recursion" not in text
    assert out.elapsed < BOUND + MARGIN, f"the call took {out.elapsed:.1f} s"
    assert not out.threads_left, out.threads_left
    assert open_sockets() <= sockets, "a socket outlived close"
