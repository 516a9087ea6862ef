"""The hostile-server report (``python -m tests.bench.hostile``) runs and sums up every
runtime: its case count, worst overrun and worst memory growth. Its figures are not asserted
(shared machines are noisy)."""

from __future__ import annotations

import contextlib
import io
import json

import pytest

from tests.bench import hostile


@pytest.mark.timeout(120)
def test_the_report_sums_up_each_runtime() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        status = hostile.main(
            ["--case", "status-404-empty", "--case", "binary-frame-then-answer", "--json"]
        )
    assert status == 0
    document = json.loads(out.getvalue())
    assert {(r["kind"], r["runtime"]) for r in document["rows"]} == {
        (kind, runtime) for kind in ("rest", "stream") for runtime in ("asyncio", "trio", "sync")
    }
    assert [line["runtime"] for line in document["summary"]] == ["asyncio", "trio", "sync"]
    for line in document["summary"]:
        assert line["cases"] == 2
        assert isinstance(line["worst_overrun_s"], float)
        assert line["worst_peak_bytes"] > 0
        assert line["worst_overrun_case"] in (
            "rest/status-404-empty",
            "stream/binary-frame-then-answer",
        )


def test_the_text_report_ends_with_one_line_per_runtime() -> None:
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        hostile.main(["--case", "status-404-empty", "--runtime", "sync", "--only", "rest"])
    last = out.getvalue().strip().splitlines()[-1]
    assert last.startswith("sync") and "1 cases" in last and "worst overrun" in last
    assert "worst peak growth" in last
