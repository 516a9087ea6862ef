"""The runtime facades of ``tests/integration`` for the durable-workflow scenarios: every
``runtime`` test runs on asyncio, trio and blocking, every ``loop_runtime`` test on asyncio
and trio."""

from tests.integration.conftest import loop_runtime, recorder, runtime  # noqa: F401 - shared fixtures
