"""The conformance corpus: our cases under ``cases/<family>/``, or a reference-format corpus.

By default every runner reads ``cases/<family>/*.json`` beside this module (the format is
described in ``README.md``). With ``CODER_CONFORMANCE_DIR`` set, the runners read the
``<family>-*.json`` files of that directory instead, in the reference client's format, through
``convert.py``; a file that cannot be mapped fails its test with the key and the file named.

Either way each case becomes one test whose id is ``<family>-<name>``.
"""

from __future__ import annotations

import json
import os
import pathlib
from typing import Any

import attrs
import pytest

from .convert import ConversionError, convert_file

__all__ = [
    "CASES_DIR",
    "ENV_VAR",
    "Case",
    "Unreadable",
    "case_of",
    "cases",
    "load_family",
    "our_cases",
]

CASES_DIR = pathlib.Path(__file__).resolve().parent / "cases"
#: The environment variable naming a reference-format corpus to run instead of ours.
ENV_VAR = "CODER_CONFORMANCE_DIR"


@attrs.frozen
class Case:
    """One case: ``given`` (the inputs) and ``expect`` (what the library must produce)."""

    family: str
    name: str
    given: dict[str, Any]
    expect: dict[str, Any]
    path: pathlib.Path
    about: str | None = None

    @property
    def id(self) -> str:
        return f"{self.family}-{self.name}"

    @property
    def level(self) -> str | None:
        return self.given.get("level")


@attrs.frozen
class Unreadable:
    """A reference-format case that could not be mapped; its test fails with ``error``."""

    error: ConversionError
    level: str | None

    def load(self) -> Case:
        raise self.error


def our_cases(family: str, directory: pathlib.Path = CASES_DIR) -> list[Case]:
    """Every case of ``family`` in our corpus (whatever ``CODER_CONFORMANCE_DIR`` says)."""
    out = []
    for path in sorted((directory / family).glob("*.json")):
        document = json.loads(path.read_text(encoding="utf-8"))
        out.append(
            Case(
                family=family,
                name=path.stem,
                given=document["given"],
                expect=document["expect"],
                path=path,
                about=document.get("about"),
            )
        )
    return out


def _reference(family: str, directory: pathlib.Path) -> list[Case | Unreadable]:
    out: list[Case | Unreadable] = []
    for path in sorted(directory.glob(f"{family}-*.json")):
        try:
            converted = convert_file(path)
        except ConversionError as exc:
            level = None
            try:  # lets the failure land with the runner of the case's level
                level = json.loads(path.read_text(encoding="utf-8"))["input"]["level"]
            except Exception:
                pass
            out.append(Unreadable(exc, {"model": "session"}.get(level, level)))
            continue
        out.append(
            Case(
                family=family,
                name=converted["name"],
                given=converted["given"],
                expect=converted["expect"],
                path=path,
            )
        )
    return out


def load_family(family: str, reference_dir: str | os.PathLike[str] | None = None) -> list[Any]:
    """Every case of ``family``: ours, or the reference-format corpus in ``reference_dir``
    (default: ``$CODER_CONFORMANCE_DIR`` when set)."""
    if reference_dir is None:
        reference_dir = os.environ.get(ENV_VAR) or None
    if reference_dir is None:
        return list(our_cases(family))
    directory = pathlib.Path(reference_dir)
    if not directory.is_dir():
        raise FileNotFoundError(f"{ENV_VAR}={reference_dir!s} is not a directory")
    return _reference(family, directory)


def cases(family: str, *, level: str | None = None) -> list[Any]:
    """``pytest.param`` per case of ``family`` (of that ``level`` when given): the test gets
    a ``Case``, or an ``Unreadable`` whose ``load()`` raises the conversion error."""
    params = []
    for item in load_family(family):
        if isinstance(item, Unreadable):
            if level is None or item.level in (None, level):
                params.append(pytest.param(item, id=pathlib.Path(item.error.source).stem))
            continue
        if level is None or item.level == level:
            params.append(pytest.param(item, id=item.id))
    if not params and not os.environ.get(ENV_VAR):
        # Our corpus always has every family: an empty one is a broken checkout.
        raise LookupError(
            f"no {family} cases{f' at level {level}' if level else ''} in {CASES_DIR}"
        )
    return params


def case_of(item: Case | Unreadable) -> Case:
    """The case a test was given (an unreadable one raises its conversion error)."""
    return item.load() if isinstance(item, Unreadable) else item
