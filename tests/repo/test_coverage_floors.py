"""The coverage floors (``tests/coverage_floors.py``): a whole run fails when a package's
branch coverage is under its floor, reports every package's figure, and a partial run only
reports."""

from __future__ import annotations

import shlex
import tomllib
from pathlib import Path

import pytest

from tests.coverage_floors import floors

pytest_plugins = ["pytester"]

PACKAGE = """
def half(flag):
    if flag:
        return "yes"
    return "no"
"""
TEST = """
from pkg import half

def test_half():
    assert half(True) == "yes"
"""


@pytest.fixture
def project(pytester: pytest.Pytester) -> pytest.Pytester:
    pytester.makepyfile(**{"pkg/__init__.py": PACKAGE, "checks/test_pkg.py": TEST})
    return pytester


def run(project: pytest.Pytester, floor: float, *args: str, report: str = "") -> pytest.RunResult:
    project.makeini(
        f"""
        [pytest]
        testpaths = checks
        addopts = -p tests.coverage_floors -p no:cacheprovider --cov=pkg --cov-branch {report}
        coverage_floors =
            pkg {floor}
        """
    )
    return project.runpytest_subprocess(*args)


def test_a_whole_run_under_a_floor_fails_and_names_the_package(project: pytest.Pytester) -> None:
    result = run(project, 90.0)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        [
            "*coverage per package*",
            "pkg*66.7%*floor*90.0%*BELOW THE FLOOR",
            "FAIL coverage under its floor: pkg 66.7% < 90.0%",
        ]
    )
    result.assert_outcomes(passed=1)


def test_a_whole_run_over_its_floors_passes_and_reports_them(project: pytest.Pytester) -> None:
    result = run(project, 40.0)
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*- coverage per package -*", "pkg*66.7%*floor*40.0%"])
    result.stdout.no_fnmatch_line("*BELOW THE FLOOR*")


def test_a_partial_run_reports_without_applying_the_floors(project: pytest.Pytester) -> None:
    result = run(project, 90.0, "checks/test_pkg.py")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*coverage per package (floors not applied: not a whole run)*"])
    selected = run(project, 90.0, "-k", "half")
    assert selected.ret == pytest.ExitCode.OK


def test_a_malformed_floor_is_a_usage_error() -> None:
    class Config:
        def getini(self, name: str) -> list[str]:
            assert name == "coverage_floors"
            return ["pkg 90", "other lots"]

    with pytest.raises(pytest.UsageError, match="'other lots'"):
        floors(Config())  # type: ignore[arg-type]


def test_the_suite_measures_coverage_without_printing_the_table() -> None:
    """The README's test command measures every package and applies the floors, and prints the
    per-package lines only: the per-file table is asked for on the command line."""
    ini = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text("utf-8"))
    addopts = shlex.split(ini["tool"]["pytest"]["ini_options"]["addopts"])
    assert "tests.coverage_floors" in addopts
    assert "--cov-branch" in addopts
    measured = {a.removeprefix("--cov=") for a in addopts if a.startswith("--cov=")}
    packages = {line.split()[0] for line in ini["tool"]["pytest"]["ini_options"]["coverage_floors"]}
    assert measured == packages
    assert [a for a in addopts if a.startswith("--cov-report")] == ["--cov-report="]


def test_an_empty_report_prints_the_package_lines_and_no_table(project: pytest.Pytester) -> None:
    quiet = run(project, 40.0, report="--cov-report=")
    assert quiet.ret == pytest.ExitCode.OK
    quiet.stdout.fnmatch_lines(["*- coverage per package -*", "pkg*66.7%*floor*40.0%"])
    quiet.stdout.no_fnmatch_line("TOTAL*")
    under = run(project, 90.0, report="--cov-report=")
    assert under.ret == pytest.ExitCode.TESTS_FAILED
    table = run(project, 40.0, "--cov-report=term-missing", report="--cov-report=")
    table.stdout.fnmatch_lines(["TOTAL*", "*coverage per package*"])
