"""The delta-path measurement runs and sees the stream reader and the translator on the way."""

from __future__ import annotations

import pytest

from tests.bench.delta_path import measure


@pytest.mark.parametrize("runtime", ["asyncio", "sync"])
def test_a_text_delta_crosses_the_reader_and_the_translator(runtime: str) -> None:
    count, files, windows = measure(runtime, deltas=20)
    assert windows >= 1
    assert count == len(files)
    assert "coder_proto/_connection.py" in files
    assert "coder_proto/_stream/reader.py" in files
    assert "coder_proto/_stream/translator.py" in files
