"""The runtime facades of ``tests/integration`` for the durable-workflow scenarios: every
``runtime`` test runs on asyncio, trio and blocking."""

from tests.integration.conftest import recorder, runtime  # noqa: F401 - shared fixtures
