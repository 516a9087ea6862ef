"""Where the adapters' ``instrument`` finds what it turns on (docs/observability.md "Turning it
on"): the instrumenter ``coder_integrations.otel`` registers when imported, else the one an
installed distribution declares in the entry-point group ``coder_agents.instrumentation``; and
a clear ``ImportError`` when there is neither."""

from __future__ import annotations

import pathlib
import sys
import textwrap
import tomllib
from typing import Any

import pytest

import coder_io_asyncio
import coder_io_sync
import coder_io_trio
from coder_io_common import instrumentation

ROOT = pathlib.Path(__file__).resolve().parents[2]


def _install(tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch, module: str) -> None:
    """A distribution on the path whose ``otel`` instrumenter is ``module.instrument``, which
    records its calls in ``module.calls``."""
    (tmp_path / f"{module}.py").write_text(
        textwrap.dedent(
            """
            calls = []

            def instrument(target, **options):
                calls.append((target, options))
                return target
            """
        )
    )
    info = tmp_path / f"{module}-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{instrumentation.ENTRY_POINT_GROUP}]\notel = {module}:instrument\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))


def test_the_distribution_declares_the_opentelemetry_instrumenter() -> None:
    """``pyproject.toml`` declares ``coder_integrations.otel.instrument`` under the name the
    adapters look up, in the group they read."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = project["entry-points"][instrumentation.ENTRY_POINT_GROUP]
    assert declared == {"otel": "coder_integrations.otel:instrument"}


def test_importing_the_opentelemetry_module_registers_its_instrument() -> None:
    from coder_integrations import otel

    assert instrumentation._instrumenters["otel"] is otel.instrument


@pytest.mark.parametrize("adapter", [coder_io_asyncio, coder_io_trio, coder_io_sync])
def test_instrument_calls_the_instrumenter_an_entry_point_declares(
    adapter: Any, tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With nothing registered, the first distribution on the path that declares an ``otel``
    instrumenter is loaded on the first call; it gets the target and the options, and what
    it returns is returned. It is loaded once."""
    module = f"coder_probe_instrumenter_{adapter.__name__}"
    _install(tmp_path, monkeypatch, module)
    monkeypatch.setattr(instrumentation, "_instrumenters", {})
    target = object()
    assert adapter.instrument(target, agent_name="support-bot") is target
    assert adapter.instrument(target) is target
    probe = sys.modules[module]
    assert probe.calls == [
        (target, {"tracer_provider": None, "meter_provider": None, "agent_name": "support-bot"}),
        (target, {"tracer_provider": None, "meter_provider": None, "agent_name": None}),
    ]
    assert instrumentation._instrumenters == {"otel": probe.instrument}


def test_a_registered_instrumenter_comes_before_an_entry_point(
    tmp_path: pathlib.Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _install(tmp_path, monkeypatch, "coder_probe_instrumenter_unused")
    monkeypatch.setattr(instrumentation, "_instrumenters", {})
    seen: list[Any] = []
    instrumentation.register_instrumenter("otel", lambda target, **_: seen.append(target))
    coder_io_sync.instrument("agent")
    assert seen == ["agent"]
    assert "coder_probe_instrumenter_unused" not in sys.modules


def test_without_an_instrumenter_instrument_raises_a_clear_import_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(instrumentation, "_instrumenters", {})
    monkeypatch.setattr(instrumentation, "ENTRY_POINT_GROUP", "coder_agents.nothing_here")
    with pytest.raises(ImportError, match=r"'coder_agents\.nothing_here'.*'otel' extra"):
        coder_io_asyncio.instrument(object())
