"""Branch coverage per package, with a floor each (a pytest plugin, enabled in pyproject.toml's
``addopts``; the floors are its ``coverage_floors`` setting, one ``package percent`` a line).

After a run of the whole suite (no path, ``-k``, ``-m`` or deselection, nothing failed), the
coverage that pytest-cov measured is reported per package, the core's own figure first, and a
package under its floor fails the run. A partial run only reports the figures it has."""

from __future__ import annotations

import io
from typing import Any

import pytest

_FIGURES = pytest.StashKey[list[tuple[str, float, float]]]()
_FAILURES = pytest.StashKey[list[str]]()
_DESELECTED = pytest.StashKey[int]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addini(
        "coverage_floors",
        type="linelist",
        help="branch-coverage floors of a whole run, one 'package percent' a line",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_DESELECTED] = 0


def pytest_deselected(items: list[pytest.Item]) -> None:
    if items:
        config = items[0].config
        config.stash[_DESELECTED] = config.stash.get(_DESELECTED, 0) + len(items)


def floors(config: pytest.Config) -> list[tuple[str, float]]:
    """The configured ``(package, floor)`` pairs, in order."""
    out: list[tuple[str, float]] = []
    for line in config.getini("coverage_floors"):
        package, _, percent = line.partition(" ")
        try:
            out.append((package, float(percent)))
        except ValueError:
            raise pytest.UsageError(f"coverage_floors: expected 'package percent', got {line!r}")
    return out


def whole_run(session: pytest.Session) -> bool:
    """The suite ran as configured, in full, and passed: the only run the floors apply to."""
    config = session.config
    return (
        config.args_source == pytest.Config.ArgsSource.TESTPATHS
        and not config.option.keyword
        and not config.option.markexpr
        and not config.option.collectonly
        and not config.stash.get(_DESELECTED, 0)
        and not session.testsfailed
        and not session.shouldfail
        and not session.shouldstop
    )


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> Any:
    # Outside pytest-cov's own wrapper: its data is combined and saved by the time this runs.
    result = yield
    config = session.config
    plugin = config.pluginmanager.getplugin("_cov")
    controller = getattr(plugin, "cov_controller", None)
    cov = getattr(controller, "cov", None)
    if cov is None or getattr(plugin, "_disabled", False):
        return result
    figures: list[tuple[str, float, float]] = []
    for package, floor in floors(config):
        try:
            percent = cov.report(include=[f"{package}/*"], file=io.StringIO())
        except Exception:  # coverage's "No data to report": nothing of it ran
            percent = 0.0
        figures.append((package, percent, floor))
    config.stash[_FIGURES] = figures
    if whole_run(session):
        failures = [
            f"{package} {percent:.1f}% < {floor:.1f}%"
            for package, percent, floor in figures
            if percent < floor
        ]
        config.stash[_FAILURES] = failures
        if failures:
            session.testsfailed += 1
    return result


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    figures = config.stash.get(_FIGURES, None)
    if not figures:
        return
    failures = config.stash.get(_FAILURES, None)
    title = "coverage per package" + (
        " (floors not applied: not a whole run)" if failures is None else ""
    )
    terminalreporter.write_sep("-", title)
    for package, percent, floor in figures:
        below = failures is not None and percent < floor
        line = f"{package:<20} {percent:5.1f}%   floor {floor:5.1f}%"
        terminalreporter.write_line(line + ("   BELOW THE FLOOR" if below else ""), red=below)
    if failures:
        terminalreporter.write_line(
            "FAIL coverage under its floor: " + ", ".join(failures), red=True, bold=True
        )
