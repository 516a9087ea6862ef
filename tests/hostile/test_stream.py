"""Hostile chat streams, on every runtime, through ``CoderAgent.generate``.

Whatever the server does on the WebSocket (its upgrade answer, frames, events), the turn
ends within its ``request_timeout`` plus a generous margin, with an answer that is the
chat's own (never another chat's events, always valid Unicode) or a library error, and no
token in errors; no thread outlives ``close``.
"""

from __future__ import annotations

import pytest

from .runtimes import ALLOWED, TOKEN, generate, open_sockets
from .server import HostileServer
from .test_rest import _chain
from .ws_cases import ORG, TURN_MARGIN, WS_CASES, WsCase


def _params() -> list[object]:
    out: list[object] = []
    for case in WS_CASES:
        for runtime in ("asyncio", "trio", "sync"):
            out.append(pytest.param(case, runtime, id=f"{case.name}-{runtime}"))
    return out


@pytest.mark.timeout(90)
@pytest.mark.parametrize(("case", "runtime"), _params())
def test_a_hostile_stream_ends_the_turn_bounded_with_its_own_answer_or_a_library_error(
    case: WsCase, runtime: str
) -> None:
    sockets = open_sockets()
    with HostileServer(case.stream_handler) as server:
        out = generate(
            runtime,
            server.url,
            "hello",
            agent={"organization_id": ORG, "request_timeout": case.bound},
        )
    if case.text is not None:
        assert out.error is None, repr(out.error)
        assert out.value.text == case.text
        out.value.text.encode("utf-8")
    else:
        assert out.error is not None, f"the turn answered {out.value!r}"
        assert isinstance(out.error, ALLOWED), repr(out.error)
        for error in _chain(out.error):
            assert TOKEN not in str(error) and TOKEN not in repr(error)
            str(error).encode("utf-8")
            assert len(str(error)) <= 8192 + 512
    if case.dropped:
        assert server.upgrades >= 2, "the client kept a connection whose peer reads nothing"
    if case.forbidden is not None:
        assert out.value is None or case.forbidden not in out.value.text
    assert out.elapsed < case.bound + TURN_MARGIN, f"the turn took {out.elapsed:.1f} s"
    assert not out.threads_left, out.threads_left
    assert open_sockets() <= sockets, "a socket outlived close"
