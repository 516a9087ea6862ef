"""The plugin as a new user meets it: the documented project layout under plain ``pytest``,
and a test that leaves a scripted answer unused failing (unless it opts out)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs._blocks import ROOT, blocks_of

pytest_plugins = ["pytester"]


def _run(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest("-p", "no:cacheprovider", "-p", "no:randomly", *args)


@pytest.mark.timeout(600)
def test_the_documented_layout_passes_under_plain_pytest(tmp_path: Path) -> None:
    blocks = blocks_of(ROOT / "docs" / "pytest-plugin.md")
    files = {b.argument: b.text for b in blocks if b.marker == "file" and b.argument}
    for block in blocks:
        first = block.text.splitlines()[0] if block.text else ""
        if block.language == "python" and first in (
            "# myapp/weather.py",
            "# tests/test_weather.py",
        ):
            files[first.removeprefix("# ")] = block.text
    assert {"pyproject.toml", "myapp/weather.py", "tests/test_weather.py"} <= set(files)
    for name, text in files.items():
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    # The installed package, as `pip install -e` gives it; the project's root is not on the
    # path: only the documented pyproject.toml puts it there.
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    pytest_script = Path(sys.executable).with_name("pytest")
    done = subprocess.run(
        [str(pytest_script), "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert "1 passed" in done.stdout  # on asyncio: the page's conftest.py pins it
    # Without it (and without the page's conftest.py, whose folder pytest also puts on the
    # path) the tests cannot import the code.
    (tmp_path / "pyproject.toml").unlink()
    (tmp_path / "conftest.py").unlink()
    without = subprocess.run(
        [str(pytest_script), "-p", "no:cacheprovider", "-q", "--collect-only"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert without.returncode != 0 and "No module named 'myapp'" in without.stdout


UNUSED = """
import pytest
from coder_proto.fake import Say

@pytest.mark.coder_script(Say("about Oslo"), match="Oslo")
def test_marker_rule_unused(coder_sync_agent):
    assert coder_sync_agent.generate("Bergen?", timeout=30).text

def test_pushed_unused(coder_fake):
    coder_fake.push(Say("next"))

@pytest.mark.coder_script(Say("anything"))
def test_default_unused(coder_fake):
    pass

@pytest.mark.coder_allow_unused_scripts
@pytest.mark.coder_script(Say("never"), match="never")
def test_marker_opt_out(coder_fake):
    pass

def test_attribute_opt_out(coder_fake):
    coder_fake.script(Say("never"), match="never")
    coder_fake.allow_unused_scripts = True

@pytest.mark.coder_script(Say("unused"), match="unused")
def test_failing_body_is_reported_once(coder_fake):
    assert False, "the body failed"

@pytest.mark.coder_script(Say("about Oslo"), match="Oslo")
def test_used(coder_sync_agent, coder_fake):
    coder_fake.push(Say("pushed"))
    assert coder_sync_agent.generate("Anything?", timeout=30).text == "pushed"
    assert coder_sync_agent.generate("Oslo?", timeout=30).text == "about Oslo"
    assert coder_fake.unused_scripts() == []

def test_a_whole_book_is_not_checked(coder_fake):
    coder_fake.use_book({"rules": [{"match": "x", "script": [{"type": "say", "text": "x"}]}]})
"""


def test_a_script_no_prompt_used_fails_the_test(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_unused=UNUSED)
    result = _run(pytester, "--strict-markers", "-rfE")
    result.assert_outcomes(passed=7, failed=1, errors=3)
    out = result.stdout.str()
    for test, what in (
        ("test_marker_rule_unused", "the script for prompts matching 'Oslo'"),
        ("test_pushed_unused", "a pushed script (for the next prompt)"),
        ("test_default_unused", "the script for every prompt"),
    ):
        assert f"ERROR test_unused.py::{test} - Failed: the test scripted" in out
        assert (
            f"the test scripted answers no prompt used: {what} (mark the test "
            "@pytest.mark.coder_allow_unused_scripts, or set coder_fake.allow_unused_scripts "
            "= True, if that is intended)" in out
        )
    assert "FAILED test_unused.py::test_failing_body_is_reported_once" in out
    assert "ERROR test_unused.py::test_failing_body_is_reported_once" not in out
