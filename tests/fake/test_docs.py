"""The examples of ``docs/fake-server.md`` run as written: each Python block in a fresh
interpreter (beside the script book the page shows, saved as ``book.json``), and each JSON block
loads as the script book or model catalog it is."""

from __future__ import annotations

import json
import pathlib
import re
import subprocess
import sys

import pytest

from coder_integrations.cli import main
from coder_proto.fake import FakeConfigError, ScriptBook, models_from_json

PAGE = pathlib.Path(__file__).resolve().parents[2] / "docs" / "fake-server.md"
BLOCKS = re.findall(r"^```(\w+)\n(.*?)^```", PAGE.read_text(encoding="utf-8"), re.S | re.M)
PYTHON = [code for kind, code in BLOCKS if kind == "python"]
JSON = [json.loads(code) for kind, code in BLOCKS if kind == "json"]


def test_the_page_has_its_examples() -> None:
    assert len(PYTHON) >= 4
    assert [type(value) for value in JSON] == [dict, list]


@pytest.mark.parametrize("code", PYTHON, ids=[f"python-{n}" for n in range(len(PYTHON))])
def test_python_examples_run(code: str, tmp_path: pathlib.Path) -> None:
    (tmp_path / "book.json").write_text(json.dumps(JSON[0]))
    (tmp_path / "example.py").write_text(code)
    result = subprocess.run(
        [sys.executable, "example.py"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr


def test_json_examples_load() -> None:
    book = ScriptBook.from_json(JSON[0])
    assert [rule.pattern for rule in book.rules][1] == "summari[sz]e"
    assert book.default is not None
    catalog = models_from_json(JSON[1])
    assert [(m.model, m.is_default, m.enabled) for m in catalog] == [
        ("claude-sonnet-4-6", True, True),
        ("gpt-5", False, True),
        ("retired-model", False, False),
    ]
    with pytest.raises(FakeConfigError):
        models_from_json({"models": JSON[1], "extra": 1})


def test_every_flag_the_page_names_is_in_the_help(capsys: pytest.CaptureFixture[str]) -> None:
    known: set[str] = set()
    # The page serves a script book and chats with it: the flags of both commands.
    for command in ("fake-server", "chat"):
        with pytest.raises(SystemExit):
            main([command, "--help"])
        known |= set(re.findall(r"(--[a-z][a-z-]+)", capsys.readouterr().out))
    named = set(re.findall(r"(?<![\w-])(--[a-z][a-z-]+)", PAGE.read_text(encoding="utf-8")))
    assert named <= known, sorted(named - known)
