"""The delta-path measurement runs, sees the stream reader and the translator on the way, and
none of the bookkeeping a delta no longer crosses."""

from __future__ import annotations

import pytest

from tests.bench.delta_path import measure


@pytest.mark.parametrize("runtime", ["asyncio", "sync"])
def test_a_text_delta_crosses_the_reader_and_the_translator(
    runtime: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The benchmark's agent factory writes the fake's URL and token into the environment:
    # they are put back as they were when the test ends.
    monkeypatch.setenv("CODER_URL", "")
    monkeypatch.setenv("CODER_SESSION_TOKEN", "")
    count, files, windows, calls, functions = measure(runtime, deltas=20)
    assert windows >= 1
    assert count == len(files)
    assert calls > 0
    # Bookkeeping a delta no longer passes through: the redactor (a message without the
    # token) and, without a recorder, the session's report of what its readers decoded.
    assert "coder_proto/_redact.py" not in files
    assert not [name for name in functions if name.endswith(":ws_events")]
    assert "coder_proto/_connection.py" in files
    assert "coder_proto/_stream/reader.py" in files
    assert "coder_proto/_stream/translator.py" in files
