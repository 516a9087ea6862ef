"""The fake server of ``tests/integration`` for the event-loop scenarios (``server``: a fake
server over loopback with the token check); the runtime facades (``loop_runtime``: asyncio and
trio) are ``tests/runtimes.py``'s, from ``tests/conftest.py``."""

from tests.integration.conftest import make_server, server  # noqa: F401 - shared fixtures
