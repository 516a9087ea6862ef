"""Nothing imports OpenTelemetry until ``instrument`` is called: the adapters, the core and
an agent's turns without an observer run without it."""

from __future__ import annotations

import subprocess
import sys
import textwrap


def _run(code: str) -> str:
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_importing_the_adapters_and_the_core_imports_no_opentelemetry() -> None:
    out = _run(
        """
        import sys
        import coder_proto, coder_io_asyncio, coder_io_trio, coder_io_sync
        import coder_io_common.observer, coder_io_common.instrumentation
        assert callable(coder_io_sync.instrument)
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """
    )
    assert out == "[]"


def test_a_turn_without_instrumentation_imports_no_opentelemetry() -> None:
    out = _run(
        """
        import sys
        from coder_integrations.fake_server import FakeCoderServer
        from coder_io_sync import CoderAgent
        with FakeCoderServer(chunk_delay=0) as server:
            with CoderAgent(
                base_url=server.url, token=server.token, organization_id=server.organization_id
            ) as agent:
                agent.generate("hello")
        print(sorted(m for m in sys.modules if m.startswith("opentelemetry")))
        """
    )
    assert out == "[]"


def test_instrument_imports_opentelemetry_when_called() -> None:
    out = _run(
        """
        import sys
        from coder_io_asyncio import CoderChatClient, instrument
        client = CoderChatClient("http://127.0.0.1:9", "t0ken")
        assert instrument(client) is client
        print("opentelemetry.trace" in sys.modules)
        """
    )
    assert out == "True"
