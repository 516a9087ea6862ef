"""The fixtures of ``tests/integration`` for the event-loop scenarios (``loop_runtime``: asyncio
and trio; ``server``: a fake server over loopback with the token check)."""

from tests.integration.conftest import (  # noqa: F401 - shared fixtures
    loop_runtime,
    make_server,
    recorder,
    server,
)
