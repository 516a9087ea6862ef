"""The accelerators are chosen in ``coder_proto._speedups``, each listed with a measured gain,
and the benchmark that measures them runs."""

from __future__ import annotations

import importlib
import json
import re

import pytest

from coder_proto import _json, _speedups


def test_orjson_is_used_exactly_when_it_is_installed() -> None:
    try:
        import orjson
    except ImportError:
        assert _speedups.orjson is None
        assert _json.loads is _json.stdlib_loads
    else:
        assert _speedups.orjson is orjson
        assert _json.loads is _json.orjson_loads


@pytest.mark.parametrize("hot", _speedups.HOT_PATHS, ids=lambda h: h.where)
def test_every_listed_hot_path_exists_and_has_a_gain(hot: _speedups.HotPath) -> None:
    parts = hot.where.split(".")
    # The longest importable prefix is the module; the rest are attributes.
    for cut in range(len(parts), 0, -1):
        try:
            target: object = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            target = getattr(target, name)
        break
    else:  # pragma: no cover - the test fails below
        target = None
    assert callable(target), f"{hot.where} does not name a function"
    assert re.search(r"\d(\.\d+)?x", hot.gain), f"{hot.where}: no measured ratio in {hot.gain!r}"


def test_every_gain_is_a_measured_ratio() -> None:
    for gain in (_speedups.ORJSON_GAIN, _speedups.STD_LOADS_GAIN, _speedups.ORJSON_DUMPS_GAIN):
        assert re.search(r"\d(\.\d+)?x", gain)


def test_the_speedups_benchmark_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from tests.bench import speedups

    assert speedups.main(["--json", "--rounds", "1"]) == 0
    results = json.loads(capsys.readouterr().out)
    names = [r["name"] for r in results]
    assert any("std_loads" in n for n in names) and any("_split_frames" in n for n in names)
    assert all(r["gain"] > 0 for r in results)
