"""The benchmark suite runs from its one command and reports in the documented shape
(``python -m tests.bench``; issue "benchmark suite"). Timings are never asserted: only that
every benchmark produced a well-formed line, and that the core's output was checked."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
import sys

import pytest

from tests.bench.__main__ import format_table
from tests.bench._common import Result
from tests.bench._data import generator_path

ROOT = pathlib.Path(__file__).resolve().parents[1]
KEYS = {"name", "n", "value_s", "floor_s", "ratio", "extra"}


def _run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tests.bench", *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        env={**os.environ, **(env or {})},
    )


@pytest.fixture(scope="module")
def smoke_results() -> list[dict[str, object]]:
    try:
        generator_path()
    except Exception as exc:  # the shared directory is not beside this checkout
        pytest.skip(str(exc))
    proc = _run("--smoke", "--json")
    assert proc.returncode == 0, proc.stderr[-2000:]
    document = json.loads(proc.stdout)
    assert isinstance(document, list)
    return document


def test_json_is_a_list_of_result_objects(smoke_results: list[dict[str, object]]) -> None:
    assert smoke_results
    for item in smoke_results:
        assert set(item) == KEYS, item
        assert isinstance(item["name"], str) and item["name"]
        assert isinstance(item["n"], int)
        for key in ("value_s", "floor_s", "ratio"):
            assert item[key] is None or isinstance(item[key], int | float), (key, item)
        assert isinstance(item["extra"], dict)


def test_every_suite_reports(smoke_results: list[dict[str, object]]) -> None:
    names = [str(item["name"]) for item in smoke_results]
    for prefix in ("core.", "scaling.", "e2e", "memory.", "fleet."):
        assert any(name.startswith(prefix) for name in names), (prefix, names)


def test_core_lines_are_measured_with_targets(smoke_results: list[dict[str, object]]) -> None:
    """The core benchmarks run everywhere (no adapter needed) and carry their target and
    verdict; their output was checked against the transcript before being timed."""
    wanted = {
        "core.frames.one",
        "core.frames.batched",
        "core.ws.one",
        "core.ws.batched",
        "scaling.frames.one",
        "scaling.backlog.batched",
    }
    by_name = {item["name"]: item for item in smoke_results}
    assert wanted <= set(by_name)
    for name in wanted:
        item = by_name[name]
        extra = item["extra"]
        assert isinstance(extra, dict)
        assert "skipped" not in extra
        assert isinstance(item["value_s"], float) and item["value_s"] > 0
        assert isinstance(item["floor_s"], float) and item["floor_s"] > 0
        assert "target" in extra
    assert "exponent" in by_name["scaling.frames.one"]["extra"]  # type: ignore[operator]


def test_skipped_lines_say_why(smoke_results: list[dict[str, object]]) -> None:
    for item in smoke_results:
        extra = item["extra"]
        assert isinstance(extra, dict)
        if "skipped" in extra:
            assert isinstance(extra["skipped"], str) and extra["skipped"]
            assert item["value_s"] is None and item["ratio"] is None


def test_table_names_every_result(smoke_results: list[dict[str, object]]) -> None:
    results = [Result(**item) for item in smoke_results]  # type: ignore[arg-type]
    table = format_table(results)
    for result in results:
        assert result.name in table


def test_missing_shared_directory_exits_nonzero_with_reason(tmp_path: pathlib.Path) -> None:
    proc = _run("--smoke", "--json", env={"CODER_SHARED_DIR": str(tmp_path / "absent")})
    assert proc.returncode == 2
    assert "gen_transcript.py" in proc.stderr
    assert proc.stdout == ""
