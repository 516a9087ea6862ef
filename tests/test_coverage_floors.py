"""The coverage floors (``tests/coverage_floors.py``): a whole run fails when a package's
branch coverage is under its floor, reports every package's figure, and a partial run only
reports."""

from __future__ import annotations

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


def run(project: pytest.Pytester, floor: float, *args: str) -> pytest.RunResult:
    project.makeini(
        f"""
        [pytest]
        testpaths = checks
        addopts = -p tests.coverage_floors -p no:cacheprovider --cov=pkg --cov-branch
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
